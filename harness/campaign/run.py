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

from harness.campaign.expand import expand
from harness.campaign.matrix_progress import CellState, LiveLines
from harness.campaign.matrix_spec import MatrixSpec
from harness.campaign.planning import cell_slots, median_duration_s, memory_warnings, pool_order
from harness.campaign.pool import GpuSlots, WorkerPool, host_gpu_count, run_local
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
    store = Store(spec.store_dir)
    cells = {c.name: c for c in spec.cells()}
    existing = [r for r in store.load() if r.cell in cells]
    done = done_ids(existing)
    states = {name: CellState(name=name) for name in cells}
    for r in existing:
        states[r.cell].add(r)
    key = pool_order(list(cells))
    pending = sorted((t for t in trials if t.trial_id not in done), key=lambda t: key(t.cell, t.trial_index))
    if backend is not None:
        num_gpus = 0  # the cluster's scheduler admits GPU trials, not this host's slots
    gpus = GpuSlots(host_gpu_count() if num_gpus is None else num_gpus, spec.per_gpu)
    for line in memory_warnings(spec, existing, {cells[t.cell].workload.name for t in pending}):
        stream.write(line + "\n")
    slots = cell_slots(spec, existing)
    live_lines = LiveLines(list(states.values()), stream, stream.isatty() if live is None else live)
    by_cell: dict[str, list[TrialResult]] = collections.defaultdict(list)
    for r in existing:
        by_cell[r.cell].append(r)
    expected = {n: median_duration_s(rs) for n, rs in by_cell.items()} if spec.finish_by_s is not None else {}
    kill_running = None
    if backend is not None:
        for line in backend.plan(
            {n: (c.workload.cpus, c.workload.gpus, slots[n]) for n, c in cells.items()},
            spec.per_gpu,
            max_time_s=spec.max_time_s,
            finish_by_s=spec.finish_by_s,
            expected_s=expected,
        ):
            stream.write(line + "\n")
        spec = dataclasses.replace(spec, workers=workers or backend.workers())
        run_fn, kill_running = backend.run, backend.kill_running
    pool = WorkerPool(
        spec=spec,
        pending=pending,
        states=states,
        store=store,
        gpus=gpus,
        lines=live_lines,
        need_gpus={n: (c.workload.gpus, slots[n]) for n, c in cells.items()},
        run_fn=run_fn or run_local,
        attempts=collections.Counter(r.trial_id for r in existing),
        expected_s=expected,
        kill_running=kill_running,
    )
    start = time.monotonic()
    try:
        new = pool.run()
    finally:
        live_lines.close()
    return MatrixRun(
        spec=spec,
        records=existing + new,
        ran=len(new),
        resumed=len(trials) - len(pending),
        left=pool.left,
        elapsed_s=time.monotonic() - start,
        left_by_time=pool.left_by_time,
        lost=pool.lost,
    )
