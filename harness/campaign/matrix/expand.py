"""A matrix spec expanded into deterministic trials, validated before anything runs.

`expand()` turns the spec into `TrialSpec`s with ids `<matrix>/<cell>/<i>`, where a cell is named
`<workload>:<strategy>@<plan>` (`@-` without a plan). Plan seeds are `seed + i` for trial i of
every cell: strategies are compared under identical schedules (common random numbers), which
sharpens raw-vs-fix comparisons, and a rerun of the same spec produces the same ids and seeds,
which is what resume relies on. Fixes are checked against `harness.runtime.fixes.FIXES`, plans against the
scheduler and workload files against the disk, so bad input fails before anything is run or
written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dflash.presets import PRESETS
from harness.campaign import plans
from harness.campaign.matrix.spec import Cell, MatrixError, MatrixSpec, Workload
from harness.campaign.plans import PlanChoice
from harness.faults.scheduler import InvalidPlan
from harness.runtime.fixes import FIXES
from harness.trial.cells import trial_id
from harness.trial.spec import REPO_ROOT, TrialSpec, WorkloadSpec


def expand(spec: MatrixSpec) -> list[TrialSpec]:
    """Every trial of every cell, cell by cell; raises MatrixError before anything runs."""
    cells = spec.cells()
    check_cells(cells)
    trials = []
    for cell in cells:
        argv = cell.workload.argv + tuple(a for kv in cell.strategy.sets for a in ("--set", kv))
        for i in range(cell.trials):
            trials.append(
                TrialSpec(
                    trial_id=trial_id(spec.name, cell.name, i),
                    cell=cell.name,
                    workload=WorkloadSpec(kind=cell.workload.kind, argv=argv),
                    # A command cell has no fixes (check_cells): it runs as it is, no fix layer.
                    fixes=None if cell.workload.kind == "command" else cell.strategy.fixes,
                    plan=plan_json(cell.plan, spec.seed + i),
                    env=dict(cell.workload.env),
                    timeout_s=cell.workload.timeout_s,
                    hang_s=cell.workload.hang_s,
                    trial_index=i,
                    python=spec.python,
                )
            )
    return trials


def check_cells(cells: list[Cell]) -> None:
    """Fix names, strategy/workload compatibility, workload files and plans, checked up front."""
    for cell in cells:
        w, s = cell.workload, cell.strategy
        for fix in s.fixes:
            if fix not in FIXES:
                raise MatrixError(
                    f"unknown strategy {s.name!r}: no fix named {fix!r} (fixes: {', '.join(sorted(FIXES))})"
                )
        if s.fixes and w.kind == "command":
            raise MatrixError(f"strategy {s.name!r} has fixes but workload {w.name!r} is a command")
        if s.sets and w.kind != "dflash":
            raise MatrixError(f"strategy {s.name!r} has --set overrides but workload {w.name!r} is not dflash")
        check_workload_files(w)
        plan_json(cell.plan, 0)


def check_workload_files(w: Workload) -> None:
    """What is missing before a run: a repro script, a program or script, a dflash preset."""
    if w.kind == "dflash":
        args = list(w.argv)
        for flag, value in zip(args, args[1:]):
            if flag == "--preset" and value not in PRESETS:
                raise MatrixError(f"workload {w.name!r}: no dflash preset {value!r} (known: {', '.join(PRESETS)})")
    elif w.kind == "repro":
        script = w.argv[0] if w.argv[0].endswith(".py") else w.argv[0] + ".py"
        if "/" in script or not (REPO_ROOT / "repro" / script).is_file():
            raise MatrixError(f"workload {w.name!r}: no repro script repro/{script}")
    elif w.kind == "command":
        _check_command(w)


def _check_command(w: Workload) -> None:
    """The program, and the script an interpreter is given (the usual way to be missing)."""
    prog = w.argv[0]
    if "/" in prog:
        found = (REPO_ROOT / prog).is_file() or Path(prog).is_file()
    else:
        found = shutil.which(prog) is not None
    if not found:
        raise MatrixError(f"workload {w.name!r}: program {prog!r} not found")
    if Path(prog).name.startswith("python") and len(w.argv) > 1 and w.argv[1].endswith(".py"):
        script = Path(w.argv[1])
        if not (script.is_file() or (REPO_ROOT / script).is_file()):
            raise MatrixError(f"workload {w.name!r}: script {w.argv[1]!r} not found")


def plan_json(choice: PlanChoice, seed: int) -> dict[str, Any] | None:
    """`plans.plan_json`, its bad input a spec's error."""
    try:
        return plans.plan_json(choice, seed)
    except InvalidPlan as e:
        raise MatrixError(str(e)) from None
