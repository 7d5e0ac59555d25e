"""Matrix specs: named workloads x strategies x fault plans, in groups; a cell is one
(workload, strategy, plan) and runs `trials` trials.

A `MatrixSpec` holds named workloads and strategies and one or more groups; each group is the
product of some workloads, strategies and plans (so a repro is only crossed with the fixes that
apply to it). Specs come from `harness.campaign.matrix.presets` (named matrices) and
`harness.campaign.matrix.specfile` (the JSON file form)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.campaign.plans import PlanChoice
from harness.runtime.errors import UserInputError
from harness.trial.cells import cell_name
from harness.trial.interpreter import interpreter_versions
from harness.trial.spec import WORKLOAD_KINDS, InvalidSpec

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_HANG_S = 60.0


class MatrixError(UserInputError):
    """A matrix spec the user can fix: unknown strategy, malformed plan, missing workload."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Workload:
    name: str
    """Short name used in cell names (`r06`, `dflash-tiny`)."""
    kind: str
    """`dflash` (argv after `python -m dflash train`), `repro` (bare script name under repro/, then
    its arguments) or `command` (the full argv, run from the repository root)."""
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Deadline of one trial; past it the trial is killed (HANG or TIMEOUT)."""
    hang_s: float = DEFAULT_HANG_S
    """No heartbeat change and no output growth for this long means HANG."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment for the trial process."""
    gpus: int = 0
    """GPUs one trial of this workload occupies (0 = CPU only)."""
    gpu_slots: int = 1
    """Of each of its GPUs' `per_gpu` slots, how many one trial takes: a trial of 20 GiB on a GPU
    shared 12 ways takes 3, so that the GPU's memory, not only its trial count, bounds the packing
    (the H200 campaign's first 115 trials lost 23 to out-of-memory with one slot each)."""
    cpus: int = 1
    """Cores one trial takes, where a scheduler counts them: a Ray task asks for this many CPUs
    (harness.campaign.ray_backend). The local pool counts trials (`workers`), not cores."""

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise MatrixError(f"workload {self.name!r}: kind must be one of {WORKLOAD_KINDS}, got {self.kind!r}")
        if not self.argv:
            raise MatrixError(f"workload {self.name!r}: argv is empty")
        if self.timeout_s <= 0 or self.hang_s <= 0:
            raise MatrixError(f"workload {self.name!r}: timeout_s and hang_s must be > 0")
        if self.gpus < 0:
            raise MatrixError(f"workload {self.name!r}: gpus must be >= 0")
        if self.gpu_slots < 1:
            raise MatrixError(f"workload {self.name!r}: gpu_slots must be >= 1")
        if self.cpus < 1:
            raise MatrixError(f"workload {self.name!r}: cpus must be >= 1")
        check_name(self.name, "workload")


@dataclass(kw_only=True, slots=True, frozen=True)
class Strategy:
    name: str
    """`raw`, a fix name, `a+b` for a combination, or a free name for override-only strategies."""
    fixes: tuple[str, ...] = ()
    """Names from `harness.runtime.fixes.FIXES`, passed as `--set fixes=...` (dflash) or `--fix` (repro)."""
    sets: tuple[str, ...] = ()
    """Extra `section.key=value` overrides for dflash workloads (e.g. `compile.mode=none`)."""

    def __post_init__(self) -> None:
        check_name(self.name, "strategy")


NO_PLAN = PlanChoice(name="-")


@dataclass(kw_only=True, slots=True, frozen=True)
class Group:
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    plans: tuple[PlanChoice, ...] = (NO_PLAN,)
    trials: int | None = None
    """Trials per cell in this group; None = the matrix default."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Cell:
    workload: Workload
    strategy: Strategy
    plan: PlanChoice
    trials: int

    @property
    def name(self) -> str:
        return cell_name(self.workload.name, self.strategy.name, self.plan.name)


@dataclass(kw_only=True, slots=True)
class MatrixSpec:
    name: str
    """Matrix name: trial ids start with it and the default store is results/<name>."""
    workloads: dict[str, Workload]
    strategies: dict[str, Strategy]
    groups: tuple[Group, ...]
    trials: int = 10
    """Trials per cell (the max-trials stop rule), unless a group says otherwise."""
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    """Trials running at once."""
    per_gpu: int = 1
    """On GPU hosts: trials sharing one GPU at once."""
    max_failures: int | None = None
    """Stop scheduling a cell once it has this many failures (None = never)."""
    max_time_s: float | None = None
    """Start no new trial after this many seconds of the whole matrix (None = no limit)."""
    finish_by_s: float | None = None
    """Start a trial only if its cell's stored median duration ends it within this many seconds of
    the matrix's start (None = no limit; a cell with no stored duration always may). For a caller
    that kills the matrix at a hard deadline, as an H200 run's budget does: a trial still running
    then is GPU time spent for no record (a `no-cudagraphs` trial whose hangs take 213 s, started
    too late). Shorter cells' trials still start meanwhile."""
    seed: int = 0
    """Trial i of every cell gets plan seed `seed + i`."""
    store: str | None = None
    """Store folder; None = results/<name>. `{torch}` in it stands for the torch version the
    trials run on (the same matrix under two torch versions needs two stores: ids repeat)."""
    python: str | None = None
    """Interpreter the trials run under (another venv's torch); None = the harness's own."""
    only: tuple[str, ...] = ()
    """Glob patterns over cell names (`fnmatch`, e.g. `*:no-cudagraphs*@dflash-stages`): run and
    show only the cells matching one; () = every cell. Ids and seeds do not change, so a subset
    run resumes and extends the full matrix's store (one ten-minute H200 run cannot run all 76
    cells of gpu-campaign)."""
    gpu_mem_gib: float | None = None
    """Pack GPU trials by their stored memory peaks on GPUs of this many GiB (`--pack-by-memory`):
    a cell measured smaller than its workload's gpu_slots takes fewer slots (cell_slots); None =
    each workload's fixed gpu_slots."""

    def __post_init__(self) -> None:
        check_name(self.name, "matrix")
        if self.trials < 1 or self.workers < 1 or self.per_gpu < 1:
            raise MatrixError("trials, workers and per_gpu must be >= 1")
        if self.gpu_mem_gib is not None and self.gpu_mem_gib <= 0:
            raise MatrixError("gpu_mem_gib must be > 0")
        if self.max_failures is not None and self.max_failures < 1:
            raise MatrixError("max_failures must be >= 1")
        if self.max_time_s is not None and self.max_time_s <= 0:
            raise MatrixError("max_time_s must be > 0")
        if self.finish_by_s is not None and self.finish_by_s <= 0:
            raise MatrixError("finish_by_s must be > 0")
        if not self.groups:
            raise MatrixError(f"matrix {self.name!r} has no cells")
        for group in self.groups:
            _check_group(self, group)
        self._check_only()

    def _check_only(self) -> None:
        """Every `only` glob selects a cell: a typo is an error, not an empty run."""
        names = [c.name for c in self._all_cells()] if self.only else []
        for pattern in self.only or ():
            if not fnmatch.filter(names, pattern):
                raise MatrixError(
                    f"no cell of matrix {self.name!r} matches {pattern!r} "
                    f"(`python -m harness matrix --list` shows the cells)"
                )

    @property
    def store_dir(self) -> Path:
        store = self.store or str(Path("results") / self.name)
        if "{torch}" in store:
            try:
                torch = interpreter_versions(self.python)[0] or "none"
            except InvalidSpec as e:
                raise MatrixError(str(e)) from None
            store = store.replace("{torch}", torch)
        return Path(store)

    def cells(self) -> list[Cell]:
        """The cells to run, in group order: every cell, or those `only` selects."""
        cells = self._all_cells()
        if not self.only:
            return cells
        return [c for c in cells if any(fnmatch.fnmatchcase(c.name, p) for p in self.only)]

    def _all_cells(self) -> list[Cell]:
        """All cells in group order; a cell listed twice is an error (its ids would collide)."""
        cells: list[Cell] = []
        seen: set[str] = set()
        for group in self.groups:
            for w in group.workloads:
                for s in group.strategies:
                    for p in group.plans:
                        cell = Cell(
                            workload=self.workloads[w],
                            strategy=self.strategies[s],
                            plan=p,
                            trials=group.trials or self.trials,
                        )
                        if cell.name in seen:
                            raise MatrixError(f"cell {cell.name!r} appears twice in matrix {self.name!r}")
                        seen.add(cell.name)
                        cells.append(cell)
        return cells


def check_name(name: str, what: str) -> None:
    # Names end up in trial ids and folder names: keep them to a safe alphabet.
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+")
    if not name or not set(name) <= allowed:
        raise MatrixError(f"{what} name {name!r} must be non-empty and use only letters, digits and -_.+")


def _check_group(spec: MatrixSpec, group: Group) -> None:
    for w in group.workloads:
        if w not in spec.workloads:
            raise MatrixError(f"unknown workload {w!r} (known: {', '.join(sorted(spec.workloads))})")
    for s in group.strategies:
        if s not in spec.strategies:
            raise MatrixError(f"unknown strategy {s!r} (known: {', '.join(sorted(spec.strategies))})")
    if not (group.workloads and group.strategies and group.plans):
        raise MatrixError("a group needs at least one workload, strategy and plan")
    if group.trials is not None and group.trials < 1:
        raise MatrixError("group trials must be >= 1")
