"""Matrix specs: workloads x strategies x fault plans x trials, expanded into deterministic trials.

A `MatrixSpec` holds named workloads and strategies and one or more groups; each group is the
product of some workloads, strategies and plans (so a repro is only crossed with the fixes that
apply to it). `expand()` turns the spec into `TrialSpec`s with ids `<matrix>/<cell>/<i>`, where a
cell is named `<workload>:<strategy>@<plan>` (`@-` without a plan).

Plan seeds are `seed + i` for trial i of every cell: strategies are compared under identical
schedules (common random numbers), which sharpens raw-vs-fix comparisons, and a rerun of the same
spec produces the same ids and seeds, which is what resume relies on.

Specs come from `harness.campaign.presets` (named matrices and the JSON file form). `expand()` validates
fixes against `dflash.fixes.FIXES`, plans against the scheduler and workload files against the
disk, so bad input fails before anything is run or written.
"""

from __future__ import annotations

import collections
import fnmatch
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from harness.campaign import slots
from harness.campaign.cells import cell_name, split_cell, trial_id
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.spec import REPO_ROOT, WORKLOAD_KINDS, TrialSpec, WorkloadSpec

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_HANG_S = 60.0


class MatrixError(ValueError):
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
    (the H200 campaign lost 23/115 trials to out-of-memory with one slot each; REPORT.md)."""

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
        check_name(self.name, "workload")


@dataclass(kw_only=True, slots=True, frozen=True)
class Strategy:
    name: str
    """`raw`, a fix name, `a+b` for a combination, or a free name for override-only strategies."""
    fixes: tuple[str, ...] = ()
    """Names from `dflash.fixes.FIXES`, passed as `--set fixes=...` (dflash) or `--fix` (repro)."""
    sets: tuple[str, ...] = ()
    """Extra `section.key=value` overrides for dflash workloads (e.g. `compile.mode=none`)."""

    def __post_init__(self) -> None:
        check_name(self.name, "strategy")


@dataclass(kw_only=True, slots=True, frozen=True)
class PlanChoice:
    name: str
    """Label in cell names; the profile name for seeded plans, `-` for no plan."""
    profile: str | None = None
    """Scheduler profile: the trial's plan is `harness.faults.profiles.plan_from_seed(seed, profile)`."""
    explicit: dict[str, Any] | None = None
    """A fixed plan (the JSON of `Plan.to_json`), the same for every trial."""


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
    that kills the matrix at a hard deadline, as a device call's budget does: a trial still running
    then is device time spent for no record (H200 call 42, 2026-12-01, killed a `no-cudagraphs`
    trial its 213-s hangs could not have finished). Shorter cells' trials still start meanwhile."""
    seed: int = 0
    """Trial i of every cell gets plan seed `seed + i`."""
    store: str | None = None
    """Store folder; None = results/<name>."""
    only: tuple[str, ...] = ()
    """Glob patterns over cell names (`fnmatch`, e.g. `*:no-cudagraphs*@dflash-stages`): run and
    show only the cells matching one; () = every cell. Ids and seeds do not change, so a subset
    run resumes and extends the full matrix's store (one device session cannot run all 76 cells
    of gpu-campaign; REPORT.md)."""
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
        if self.only:
            names = [c.name for c in self._all_cells()]
            for pattern in self.only:
                if not fnmatch.filter(names, pattern):
                    raise MatrixError(f"no cell of matrix {self.name!r} matches {pattern!r} "
                                      f"(`python -m harness matrix --list` shows the cells)")

    @property
    def store_dir(self) -> Path:
        return Path(self.store) if self.store else Path("results") / self.name

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
                        cell = Cell(workload=self.workloads[w], strategy=self.strategies[s], plan=p,
                                    trials=group.trials or self.trials)
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


# --- expansion -----------------------------------------------------------------------------------


def expand(spec: MatrixSpec) -> list[TrialSpec]:
    """Every trial of every cell, cell by cell; raises MatrixError before anything runs."""
    cells = spec.cells()
    check_cells(cells)
    trials = []
    for cell in cells:
        argv = cell.workload.argv + tuple(a for kv in cell.strategy.sets for a in ("--set", kv))
        for i in range(cell.trials):
            trials.append(TrialSpec(
                trial_id=trial_id(spec.name, cell.name, i), cell=cell.name,
                workload=WorkloadSpec(kind=cell.workload.kind, argv=argv), fixes=cell.strategy.fixes,
                plan=plan_json(cell.plan, spec.seed + i), env=dict(cell.workload.env),
                timeout_s=cell.workload.timeout_s, hang_s=cell.workload.hang_s, trial_index=i,
            ))
    return trials


def check_cells(cells: list[Cell]) -> None:
    """Fix names, strategy/workload compatibility, workload files and plans, checked up front."""
    from dflash.fixes import FIXES  # no torch import: cheap

    for cell in cells:
        w, s = cell.workload, cell.strategy
        for fix in s.fixes:
            if fix not in FIXES:
                raise MatrixError(f"unknown strategy {s.name!r}: no fix named {fix!r} "
                                  f"(fixes: {', '.join(sorted(FIXES))})")
        if s.fixes and w.kind == "command":
            raise MatrixError(f"strategy {s.name!r} has fixes but workload {w.name!r} is a command")
        if s.sets and w.kind != "dflash":
            raise MatrixError(f"strategy {s.name!r} has --set overrides but workload {w.name!r} is not dflash")
        check_workload_files(w)
        plan_json(cell.plan, 0)


def check_workload_files(w: Workload) -> None:
    """What is missing before a run: a repro script, a program or script, a dflash preset."""
    if w.kind == "dflash":
        from dflash.presets import PRESETS  # no torch import: cheap

        args = list(w.argv)
        for flag, value in zip(args, args[1:]):
            if flag == "--preset" and value not in PRESETS:
                raise MatrixError(f"workload {w.name!r}: no dflash preset {value!r} (known: {', '.join(PRESETS)})")
    elif w.kind == "repro":
        script = w.argv[0] if w.argv[0].endswith(".py") else w.argv[0] + ".py"
        if "/" in script or not (REPO_ROOT / "repro" / script).is_file():
            raise MatrixError(f"workload {w.name!r}: no repro script repro/{script}")
    elif w.kind == "command":
        prog = w.argv[0]
        if "/" in prog:
            found = (REPO_ROOT / prog).is_file() or Path(prog).is_file()
        else:
            found = shutil.which(prog) is not None
        if not found:
            raise MatrixError(f"workload {w.name!r}: program {prog!r} not found")
        # A script argument of an interpreter is the usual way to be missing: check it too.
        if Path(prog).name.startswith("python") and len(w.argv) > 1 and w.argv[1].endswith(".py"):
            script = Path(w.argv[1])
            if not (script.is_file() or (REPO_ROOT / script).is_file()):
                raise MatrixError(f"workload {w.name!r}: script {w.argv[1]!r} not found")


def plan_json(choice: PlanChoice, seed: int) -> dict[str, Any] | None:
    """The plan a trial carries: derived from its profile, or the explicit plan with this trial's
    seed (so runtime decisions vary across trials like a profile's do), or None."""
    if choice.profile is None and choice.explicit is None:
        return None
    from harness.faults.profiles import plan_from_seed
    from harness.faults.scheduler import InvalidPlan, Plan

    try:
        if choice.profile is not None:
            return plan_from_seed(seed, choice.profile).to_dict()
        return Plan.from_dict({**choice.explicit, "seed": seed}).to_dict()
    except (InvalidPlan, ValueError) as e:
        raise MatrixError(f"malformed plan {choice.name!r}: {e}") from None


def pool_order(cell_names: Sequence[str]) -> Callable[[str, int], tuple[int, int]]:
    """The order the pool starts trials in, as a sort key of (cell, trial index): trial 0 of every
    cell, then trial 1, ..., so that a time limit leaves cells evenly covered. `run_matrix` starts
    them so; `--pending` and `python -m harness.campaign.slots` replay that order."""
    place = {name: k for k, name in enumerate(cell_names)}
    return lambda cell, index: (index, place[cell])


def median_duration_s(records: Sequence[TrialResult]) -> float | None:
    """A cell's stored median duration: what `--pending` plans with and `--finish-by` expects."""
    from harness import stats
    return stats.median_or_none([r.duration_s for r in records if r.duration_s is not None])


@dataclass(kw_only=True, slots=True)
class CellPlan:
    """What the next run of a matrix would do for one cell, from its store (`--pending`)."""

    cell: str
    planned: int
    stored: int
    """Stored records of this cell that count as trials (not TIMEOUT, RESOURCE, HARNESS_ERROR)."""
    failures: int
    other: int
    """Stored records that do not count (TIMEOUT, RESOURCE, HARNESS_ERROR); RESOURCE ones rerun."""
    pending: int
    """Trials the next run would start, stop rules permitting; 0 for a stopped cell."""
    stopped: bool
    median_s: float | None
    """Median duration of the cell's stored trials: what one more trial is likely to take."""
    share: float = 1.0
    """Fraction of one host a trial of this cell holds while it runs, as the pool packs it: 1 of
    `workers`, and for a GPU workload its `gpus x gpu_slots` of `per_gpu` slots per GPU (on one
    GPU unless `pending_plan` is told more), whichever is scarcer. Sums of duration x share are the
    wall time the pending trials need when packing is perfect: a lower bound for planning calls."""
    gpus: int = 0
    """GPUs one trial takes (its workload's)."""
    slots: int = 1
    """Slots of per_gpu one trial takes on each (`cell_slots`)."""
    pending_indices: tuple[int, ...] = ()
    """Trial indices the next run would start, in order (the pool's order is index, then cell)."""


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """The most GPU memory one trial of a GPU workload held (the trainer's final event, or its
    failed event for a run that failed, `gpu_mem_peak_gib`; or the runner's nvidia-smi samples,
    `gpu_mem_gib`, for any ending), against what the spec's packing puts on one GPU at once."""

    workload: str
    peak_gib: float
    trials: int
    """Trials with a figure (reported or sampled)."""
    at_once: int
    """Trials of this workload one GPU holds at once: per_gpu // gpu_slots."""

    def line(self) -> str:
        return (f"{self.workload}: peak {self.peak_gib:.1f} GiB over {self.trials} trial(s) that have one; "
                f"{self.at_once} at once on a GPU need ~{self.peak_gib * self.at_once:.0f} GiB")


def memory_peaks(spec: MatrixSpec, records: Sequence[TrialResult]) -> list[MemoryPeak]:
    """Per GPU workload with stored peaks (`TrialResult.gpu_peak_gib`): what to compare with the
    GPU's memory before a call (the out-of-memory messages name only the processes alive when one
    failed; REPORT.md, 2026-11-30 sixth session, where 4 gpu-bound trials at once lost 8 of 56 to
    memory)."""

    peaks: dict[str, list[float]] = collections.defaultdict(list)
    for r in records:
        peak = r.gpu_peak_gib
        if peak is not None:
            peaks[split_cell(r.cell)[0]].append(peak)
    out = []
    for name, values in sorted(peaks.items()):
        w = spec.workloads.get(name)
        if w is None or not w.gpus:
            continue
        out.append(MemoryPeak(workload=name, peak_gib=max(values), trials=len(values),
                              at_once=max(1, spec.per_gpu // w.gpu_slots)))
    return out


MEMORY_HEADROOM = 1.1
"""--pack-by-memory plans each trial at its cell's highest stored peak times this: the same cell's
trials moved by up to 35% between trials (gpu-bound eager: 46-62 GiB over 31 trials), and the max
of a few trials can sit below the next one."""
CONTEXT_GIB = 1.0
"""Per trial on top of a reported peak: the CUDA context and cuBLAS workspaces, outside the caching
allocator's `max_memory_reserved` that the workload reports. An allowance, not a measurement (the
runner's nvidia-smi samples count them, and get none)."""


def _need_of(r: TrialResult) -> float | None:
    """GiB to plan one trial of r's cell at: a reported peak times MEMORY_HEADROOM plus
    CONTEXT_GIB, a sampled one (the context counted in it) times MEMORY_HEADROOM; the higher."""
    reported, sampled = r.reported_gpu_peak_gib, r.gpu_mem_gib
    needs = [reported * MEMORY_HEADROOM + CONTEXT_GIB] if reported is not None else []
    if sampled is not None:
        needs.append(sampled * MEMORY_HEADROOM)
    return max(needs) if needs else None


def cell_slots(spec: MatrixSpec, records: Sequence[TrialResult]) -> dict[str, int]:
    """GPU slots per cell (of spec.per_gpu per GPU). Each workload's gpu_slots, unless
    spec.gpu_mem_gib is set and the cell has stored peaks of its own (finished trials' final event,
    failed ones' failed event, and for any ending the runner's nvidia-smi samples): then its highest
    need (`_need_of`) over the GiB one slot holds, rounded up, where that is fewer. Packing only
    tightens: gpu_slots is what ran without running out of memory, the allowances are guesses.
    A cell with an out-of-memory record keeps gpu_slots: its figures were too low for it once
    (a failing trial's is what it held when it died, a sampled one a lower bound). Failing cells
    never finish, so a fixed gpu_slots sized by the biggest finished cell packed every gpu-bound
    cell of the H200 campaign 2 at once whatever it held (REPORT.md, twelfth session)."""
    cells = spec.cells()
    slots = {c.name: c.workload.gpu_slots for c in cells}
    if spec.gpu_mem_gib is None:
        return slots
    own: dict[str, float] = {}
    short = {r.cell for r in records if r.outcome is Outcome.RESOURCE}
    for r in records:
        need = _need_of(r)
        if need is not None and r.cell in slots and r.cell not in short:
            own[r.cell] = max(need, own.get(r.cell, 0.0))
    per_slot = spec.gpu_mem_gib / spec.per_gpu
    for c in cells:
        if c.workload.gpus and c.name in own:
            slots[c.name] = min(slots[c.name], max(1, math.ceil(own[c.name] / per_slot)))
    return slots


def memory_warnings(spec: MatrixSpec, records: Sequence[TrialResult], workloads: set[str],
                    totals_gib: list[float] | None = None) -> list[str]:
    """One line per pending GPU workload whose stored peak, times the trials its packing puts on
    one GPU, is more than the smallest GPU here holds: the run will lose trials to memory
    (RESOURCE, retried by a later run) unless gpu_slots or --per-gpu change. Nothing when
    nvidia-smi cannot tell or no trial has a figure (`TrialResult.gpu_peak_gib`)."""
    from harness.trial import gpu
    peaks = [p for p in memory_peaks(spec, records) if p.workload in workloads]
    if not peaks:
        return []
    totals = totals_gib if totals_gib is not None else gpu.total_memory_gib()
    if not totals:
        return []
    room = min(totals)
    return [f"warning: GPU memory: {p.line()}, more than the {room:.1f} GiB of a GPU here: expect "
            f"out-of-memory trials (raise its gpu_slots or lower --per-gpu)"
            for p in peaks if p.peak_gib * p.at_once > room]


def pending_plan(spec: MatrixSpec, *, gpus: int = 1) -> list[CellPlan]:
    """Per cell: planned, stored, failures and the trials a run would start now. Reads the store;
    runs nothing. Counts and the stop rule are the running pool's (progress.CellState over every
    stored record of the cell), so a stopped cell here is one the pool would skip."""
    from harness.campaign.progress import CellState
    from harness.stores.store import Store, done_ids

    trials = expand(spec)
    records = Store(spec.store_dir).load()
    slots = cell_slots(spec, records)
    plans = []
    for cell in spec.cells():
        state = CellState(name=cell.name)
        held = [r for r in records if r.cell == cell.name]
        for r in held:
            state.add(r)
        stopped = state.stopped(spec.max_failures)
        mine = [t for t in trials if t.cell == cell.name]
        share = 1 / spec.workers
        if cell.workload.gpus:
            share = max(share, min(1.0, cell.workload.gpus * slots[cell.name] / (spec.per_gpu * max(gpus, 1))))
        done = done_ids(held)
        todo = () if stopped else tuple(sorted(t.trial_index for t in mine if t.trial_id not in done))
        plans.append(CellPlan(
            cell=cell.name, planned=len(mine), stored=state.runs, failures=state.failures,
            other=state.timeouts + state.resources + state.errors,
            pending=len(todo), stopped=stopped,
            median_s=median_duration_s(held),
            share=share, gpus=cell.workload.gpus, slots=slots[cell.name], pending_indices=todo,
        ))
    return plans


# --- running --------------------------------------------------------------------------------------

@dataclass(kw_only=True, slots=True)
class MatrixRun:
    spec: MatrixSpec
    records: list[TrialResult]
    """Every stored record of this matrix's cells, including ones from earlier (resumed) runs."""
    ran: int
    """Trials run by this invocation."""
    resumed: int
    """Planned trials found in the store and not run again."""
    left: int
    """Planned trials not run because a stop rule (max failures, max time) ended them."""
    elapsed_s: float
    left_by_time: int = 0
    """Of `left`, those --max-time left unstarted: an H200 call's summary said "106 left by stop
    rules" of trials no rule had stopped, only the call's time (REPORT.md, fourteenth session)."""


def run_matrix(spec: MatrixSpec, *, stream: TextIO | None = None, live: bool | None = None,
               num_gpus: int | None = None, run_fn: Callable[[TrialSpec, Path], TrialResult] | None = None,
               ) -> MatrixRun:
    """Run every planned trial not already in the store; returns all of this matrix's records.

    Validation (expand) happens before the store is opened, so bad input leaves it untouched.
    """
    from harness.campaign.pool import GpuSlots, WorkerPool, host_gpu_count
    from harness.campaign.progress import CellState, LiveLines
    from harness.trial.runner import run_trial
    from harness.stores.store import Store, done_ids

    trials = expand(spec)
    stream = stream or sys.stderr
    # Build the native-stack handler once, before the workers start, and say so if there is none.
    from harness.trial import native
    if native.preload() is None:
        stream.write(f"native stacks of crashing trials: off ({native.why_not()})\n")
    store = Store(spec.store_dir)
    cells = {c.name: c for c in spec.cells()}
    existing = [r for r in store.load() if r.cell in cells]
    done = done_ids(existing)
    states = {name: CellState(name=name) for name in cells}
    for r in existing:
        states[r.cell].add(r)
    key = pool_order(list(cells))
    pending = sorted((t for t in trials if t.trial_id not in done), key=lambda t: key(t.cell, t.trial_index))
    gpus = GpuSlots(host_gpu_count() if num_gpus is None else num_gpus, spec.per_gpu)
    for line in memory_warnings(spec, existing, {cells[t.cell].workload.name for t in pending}):
        stream.write(line + "\n")
    slots = cell_slots(spec, existing)
    live_lines = LiveLines(list(states.values()), stream, stream.isatty() if live is None else live)
    by_cell: dict[str, list[TrialResult]] = collections.defaultdict(list)
    for r in existing:
        by_cell[r.cell].append(r)
    expected = {n: median_duration_s(rs) for n, rs in by_cell.items()} if spec.finish_by_s is not None else {}
    pool = WorkerPool(spec=spec, pending=pending, states=states, store=store, gpus=gpus, lines=live_lines,
                 need_gpus={n: (c.workload.gpus, slots[n]) for n, c in cells.items()}, run_fn=run_fn or run_trial,
                 attempts=collections.Counter(r.trial_id for r in existing), expected_s=expected)
    start = time.monotonic()
    try:
        new = pool.run()
    finally:
        live_lines.close()
    return MatrixRun(spec=spec, records=existing + new, ran=len(new), resumed=len(trials) - len(pending),
                     left=pool.left, elapsed_s=time.monotonic() - start,
                     left_by_time=pool.left_by_time)


def replay_last(spec, records: Sequence, last: int, *, num_gpus: int = 1) -> dict[str, float]:
    """The last `last` records of a store (one run's, as `harness merge` appends them) replayed as
    the pool packs them, in strict order and with backfill, at their recorded durations and at
    the slots the store before them gave their cells (`matrix.cell_slots`); and the run's own span
    from its records' start times, to check the replay against."""
    if not 0 < last <= len(records):
        raise MatrixError(f"--replay-last must be between 1 and the store's {len(records)} records, not {last}")
    before, run = records[:-last], records[-last:]
    cells = {c.name: c for c in spec.cells()}
    unknown = sorted({r.cell for r in run} - set(cells))
    if unknown:
        raise MatrixError(f"records of cells matrix {spec.name!r} does not have: {', '.join(unknown[:3])}")
    cell_weights = cell_slots(spec, before)
    key = pool_order(list(cells))
    run = sorted(run, key=lambda r: key(r.cell, r.trial_index))
    jobs = [slots.Job(seconds=r.duration_s, need=cells[r.cell].workload.gpus, weight=cell_weights[r.cell]) for r in run]
    out = slots.strict_and_backfill(jobs, workers=spec.workers, num_gpus=num_gpus, per_gpu=spec.per_gpu)
    try:
        starts = [datetime.fromisoformat(r.started_at).timestamp() for r in run]
        out["recorded"] = max(s + r.duration_s for s, r in zip(starts, run)) - min(starts)
    except ValueError:   # a record without a start time: no span to compare with
        pass
    return out
