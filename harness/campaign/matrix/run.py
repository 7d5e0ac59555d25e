"""Running a matrix: expand it, skip what the store holds, run the rest on the worker pool in
the pool's order, and append every finished trial to the store (resumable after a kill)."""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from harness.campaign.local import run_local
from harness.campaign.matrix.expand import expand
from harness.campaign.matrix.planning import cell_slots, median_duration_s, memory_warnings, pool_order
from harness.campaign.matrix.pool import GpuSlots, WorkerPool, host_gpu_count
from harness.campaign.matrix.progress import CellState, LiveLines
from harness.campaign.matrix.spec import MatrixSpec
from harness.campaign.ray_backend import RayBackend
from harness.stores.store import Store, done_ids
from harness.trial import native
from harness.trial.outcome import TrialResult
from harness.trial.spec import TrialSpec


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
    """Of `left`, those --max-time left unstarted, told apart from the ones a stop rule ended (a
    summary once counted trials only the time limit had left as "left by stop rules")."""
    lost: int = 0
    """Trials whose worker or node was lost mid-trial (a Ray backend's): nothing stored, a resume
    runs them."""


def run_matrix(
    spec: MatrixSpec,
    *,
    stream: TextIO | None = None,
    live: bool | None = None,
    num_gpus: int | None = None,
    run_fn: Callable[[TrialSpec, Path], TrialResult] | None = None,
    backend: RayBackend | None = None,
    workers: int | None = None,
) -> MatrixRun:
    """Run every planned trial not already in the store; returns all of this matrix's records.

    Validation (expand) happens before the store is opened, so bad input leaves it untouched.
    With `backend`, the trials run as its tasks (a Ray cluster: harness.campaign.ray_backend), on
    `workers` in flight (default: the cluster's CPUs), and Ray hands out the GPUs.
    """
    trials = expand(spec)
    stream = stream or sys.stderr
    # Build the native-stack handler once, before the workers start, and say so if there is none.
    if native.preload() is None:
        stream.write(f"native stacks of crashing trials: off ({native.why_not()})\n")
    s = _stored(spec, trials)
    # With a backend the cluster's scheduler admits GPU trials, not this host's slots.
    gpu_count = 0 if backend is not None else host_gpu_count() if num_gpus is None else num_gpus
    for line in memory_warnings(spec, s.existing, {s.cells[t.cell].workload.name for t in s.pending}):
        stream.write(line + "\n")
    slots = cell_slots(spec, s.existing)
    live_lines = LiveLines(list(s.states.values()), stream, stream.isatty() if live is None else live)
    expected = _expected_s(s.existing) if spec.finish_by_s is not None else {}
    kill_running = None
    if backend is not None:
        needs = {n: (c.workload.cpus, c.workload.gpus, slots[n]) for n, c in s.cells.items()}
        _plan_on(backend, spec, needs, expected, stream)
        spec = dataclasses.replace(spec, workers=workers or backend.workers())
        run_fn, kill_running = backend.run, backend.kill_running
    pool = _pool(spec, s, GpuSlots(gpu_count, spec.per_gpu), live_lines, slots, run_fn, expected, kill_running)
    start = time.monotonic()
    try:
        new = pool.run()
    finally:
        live_lines.close()
    return _finished(spec, s, len(trials), new, pool, time.monotonic() - start)


def _finished(spec: MatrixSpec, s: _Stored, planned: int, new: list[TrialResult], pool, elapsed_s: float) -> MatrixRun:
    return MatrixRun(
        spec=spec,
        records=s.existing + new,
        ran=len(new),
        resumed=planned - len(s.pending),
        left=pool.left,
        elapsed_s=elapsed_s,
        left_by_time=pool.left_by_time,
        lost=pool.lost,
    )


@dataclass(slots=True)
class _Stored:
    """What the store holds of a matrix: its cells' records and counts, and the trials left to run."""

    store: Store
    cells: dict
    existing: list[TrialResult]
    states: dict[str, CellState]
    pending: list[TrialSpec]


def _stored(spec: MatrixSpec, trials: list[TrialSpec]) -> _Stored:
    store = Store(spec.store_dir)
    cells = {c.name: c for c in spec.cells()}
    existing = [r for r in store.load() if r.cell in cells]
    states = {name: CellState(name=name) for name in cells}
    for r in existing:
        states[r.cell].add(r)
    return _Stored(store, cells, existing, states, _pending(trials, existing, list(cells)))


def _pool(spec, s: _Stored, gpus, lines, slots, run_fn, expected, kill_running) -> WorkerPool:
    return WorkerPool(
        spec=spec,
        pending=s.pending,
        states=s.states,
        store=s.store,
        gpus=gpus,
        lines=lines,
        need_gpus={n: (c.workload.gpus, slots[n]) for n, c in s.cells.items()},
        run_fn=run_fn or run_local,
        attempts=collections.Counter(r.trial_id for r in s.existing),
        expected_s=expected,
        kill_running=kill_running,
    )


def _pending(trials: list[TrialSpec], existing: list[TrialResult], cells: list[str]) -> list[TrialSpec]:
    """The trials not yet stored, in the pool's order."""
    done = done_ids(existing)
    key = pool_order(cells)
    return sorted((t for t in trials if t.trial_id not in done), key=lambda t: key(t.cell, t.trial_index))


def _expected_s(existing: list[TrialResult]) -> dict[str, float | None]:
    """Each cell's median stored trial time: what --finish-by expects a trial of it to take."""
    by_cell: dict[str, list[TrialResult]] = collections.defaultdict(list)
    for r in existing:
        by_cell[r.cell].append(r)
    return {n: median_duration_s(rs) for n, rs in by_cell.items()}


def _plan_on(backend: RayBackend, spec: MatrixSpec, needs: dict, expected: dict, stream: TextIO) -> None:
    """Say how the cluster will place the cells' trials (their CPUs, GPUs and slots)."""
    lines = backend.plan(
        needs, spec.per_gpu, max_time_s=spec.max_time_s, finish_by_s=spec.finish_by_s, expected_s=expected
    )
    for line in lines:
        stream.write(line + "\n")
