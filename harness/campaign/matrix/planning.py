"""What the next run of a matrix would do, from its store: pending trials per cell, their
expected durations, GPU slots by stored memory peaks, and a past run replayed on the pool's
admission rule (`harness matrix --pending`, `--replay-last`, `--finish-by`)."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from harness import stats
from harness.campaign.matrix import slots
from harness.campaign.matrix.expand import expand
from harness.campaign.matrix.progress import CellState
from harness.campaign.matrix.spec import MatrixError, MatrixSpec
from harness.stores.store import Store, done_ids
from harness.trial import gpu
from harness.trial.outcome import Outcome, TrialResult

MEMORY_HEADROOM = 1.1
"""--pack-by-memory plans each trial at its cell's highest stored peak times this: the same cell's
trials moved by up to 35% between trials (gpu-bound eager: 46-62 GiB over 31 trials), and the max
of a few trials can sit below the next one."""
CONTEXT_GIB = 1.0
"""Per trial on top of a reported peak: the CUDA context and cuBLAS workspaces, outside the caching
allocator's `max_memory_reserved` that the workload reports. An allowance, not a measurement (the
runner's nvidia-smi samples count them, and get none)."""


def pool_order(cell_names: Sequence[str]) -> Callable[[str, int], tuple[int, int]]:
    """The order the pool starts trials in, as a sort key of (cell, trial index): trial 0 of every
    cell, then trial 1, ..., so that a time limit leaves cells evenly covered. `run_matrix` starts
    them so; `--pending` and `python -m harness.campaign.matrix.slots` replay that order."""
    place = {name: k for k, name in enumerate(cell_names)}
    return lambda cell, index: (index, place[cell])


def median_duration_s(records: Sequence[TrialResult]) -> float | None:
    """A cell's stored median duration: what `--pending` plans with and `--finish-by` expects."""
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
    wall time the pending trials need when packing is perfect: a lower bound for planning runs."""
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
        return (
            f"{self.workload}: peak {self.peak_gib:.1f} GiB over {self.trials} trial(s) that have one; "
            f"{self.at_once} at once on a GPU need ~{self.peak_gib * self.at_once:.0f} GiB"
        )


def memory_peaks(spec: MatrixSpec, records: Sequence[TrialResult]) -> list[MemoryPeak]:
    """Per GPU workload with stored peaks (`TrialResult.gpu_peak_gib`): what to compare with the
    GPU's memory before a run (the out-of-memory messages name only the processes alive when one
    failed; on the H200, 2026-11-30, 4 gpu-bound trials at once lost 8 of 56 to memory)."""

    peaks: dict[str, list[float]] = collections.defaultdict(list)
    for r in records:
        peak = r.gpu_peak_gib
        if peak is not None:
            peaks[r.workload or r.cell].append(peak)
    out = []
    for name, values in sorted(peaks.items()):
        w = spec.workloads.get(name)
        if w is None or not w.gpus:
            continue
        out.append(
            MemoryPeak(
                workload=name, peak_gib=max(values), trials=len(values), at_once=max(1, spec.per_gpu // w.gpu_slots)
            )
        )
    return out


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
    cell of the H200 campaign 2 at once whatever it held (2026-12-01)."""
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


def memory_warnings(
    spec: MatrixSpec, records: Sequence[TrialResult], workloads: set[str], totals_gib: list[float] | None = None
) -> list[str]:
    """One line per pending GPU workload whose stored peak, times the trials its packing puts on
    one GPU, is more than the smallest GPU here holds: the run will lose trials to memory
    (RESOURCE, retried by a later run) unless gpu_slots or --per-gpu change. Nothing when
    nvidia-smi cannot tell or no trial has a figure (`TrialResult.gpu_peak_gib`)."""
    peaks = [p for p in memory_peaks(spec, records) if p.workload in workloads]
    if not peaks:
        return []
    totals = totals_gib if totals_gib is not None else gpu.total_memory_gib()
    if not totals:
        return []
    room = min(totals)
    return [
        f"warning: GPU memory: {p.line()}, more than the {room:.1f} GiB of a GPU here: expect "
        f"out-of-memory trials (raise its gpu_slots or lower --per-gpu)"
        for p in peaks
        if p.peak_gib * p.at_once > room
    ]


def pending_plan(spec: MatrixSpec, *, gpus: int = 1) -> list[CellPlan]:
    """Per cell: planned, stored, failures and the trials a run would start now. Reads the store;
    runs nothing. Counts and the stop rule are the running pool's (matrix_progress.CellState over every
    stored record of the cell), so a stopped cell here is one the pool would skip."""
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
        plans.append(
            CellPlan(
                cell=cell.name,
                planned=len(mine),
                stored=state.runs,
                failures=state.failures,
                other=state.timeouts + state.resources + state.errors,
                pending=len(todo),
                stopped=stopped,
                median_s=median_duration_s(held),
                share=share,
                gpus=cell.workload.gpus,
                slots=slots[cell.name],
                pending_indices=todo,
            )
        )
    return plans


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
    except ValueError:  # a record without a start time: no span to compare with
        pass
    return out
