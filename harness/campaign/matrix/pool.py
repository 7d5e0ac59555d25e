"""Running trials: a pool of named worker threads over one queue, GPU slots, the kill switch.

`WorkerPool` pulls trials in the matrix's order, waits for a GPU slot (`GpuSlots`: at most
`per_gpu` trials per GPU), runs each through `run_fn` (the isolated-subprocess runner), stores the
result, and stops at the deadline (`max_time_s`) or on the first worker exception. Ctrl-C kills
every trial's process group (`kill_child_groups`) and stores nothing for them, so resume reruns
them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time

from harness.campaign.local import TrialNotRun
from harness.campaign.loop import WorkLoop, kill_child_groups
from harness.campaign.matrix import slots
from harness.trial.outcome import TrialResult
from harness.trial.spec import TrialSpec


def host_gpu_count() -> int:
    """GPUs visible to this process: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L` lines."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


@dataclasses.dataclass(eq=False)  # identity: two waiters with equal needs are two places in the queue
class Ticket:
    """A trial's place in GpuSlots' queue: the slots it waits for (capped to the machine)."""

    need: int
    weight: int


class GpuSlots:
    """At most `per_gpu` slots in use on each GPU; a trial needing g GPUs takes g distinct ones,
    and `weight` slots on each (Workload.gpu_slots; a weight above per_gpu means the GPU alone).

    Waiters are served in the matrix's order (`enqueue`), with bounded backfill
    (`slots.admit`). Strict order leaves slots idle whenever the head needs more than is free:
    `--pack-by-memory` gives the H200 campaign's gpu-bound cells 1 to 6 of 12 slots each
    (2026-12-01), and a 6-slot head with 7 slots in use holds back every 1-slot
    trial behind it. Unbounded backfill starves instead: a trial that needs 3 slots waits for as
    long as 1-slot trials keep taking each slot the moment it frees, and can miss --max-time
    entirely. So a later waiter may start ahead of the head only while the head does not fit, and
    only `max_bypass` times per head (default: one GPU's slots); then everyone waits for the head.
    A backfilled trial can still delay the head by up to its own run time: the cost of not knowing
    how long trials take."""

    def __init__(self, num_gpus: int, per_gpu: int, max_bypass: int | None = None) -> None:
        self._load = [0] * num_gpus
        self._per_gpu = per_gpu
        self._max_bypass = per_gpu if max_bypass is None else max_bypass
        self._bypassed = 0
        """Waiters started ahead of the current head; reset when the head leaves the queue."""
        self._cond = threading.Condition()
        self._queue: list[Ticket] = []

    def enqueue(self, need: int, weight: int = 1) -> Ticket | None:
        """Take a place in the queue now; `acquire(..., ticket=)` waits on it later. None when the
        trial needs no GPU (or there is none).

        WorkerPool calls this while it still holds the lock it pops trials under, so the queue is
        in the matrix's order, as `slots.simulate` (which replays a store's run from its records)
        assumes. Joining only inside `acquire` let two workers that popped trials 7 and 8 queue as
        8 then 7, and a later trial that fit at once start before the earlier one had queued."""
        if need == 0 or not self._load:
            return None
        need, weight = slots.capped(need, weight, len(self._load), self._per_gpu)
        ticket = Ticket(need, weight)
        with self._cond:
            self._queue.append(ticket)
        return ticket

    def acquire(
        self, need: int, stop: threading.Event, weight: int = 1, ticket: Ticket | None = None
    ) -> list[int] | None:
        """Least-loaded GPUs with room for `weight` more slots, in turn (`slots.admit`); None
        if `stop` is set while waiting. With `ticket` (from `enqueue`), at the place it holds;
        without, at the back of the queue."""
        if need == 0 or not self._load:
            return []
        if ticket is None:
            ticket = self.enqueue(need, weight)
        with self._cond:
            try:
                while not stop.is_set():
                    k = self._queue.index(ticket)
                    ids = slots.admit(
                        [(t.need, t.weight) for t in self._queue],
                        k,
                        self._load,
                        self._per_gpu,
                        bypassed=self._bypassed,
                        max_bypass=self._max_bypass,
                    )
                    if ids is not None:
                        if k:  # passed the head; the head's own start resets the count (finally)
                            self._bypassed += 1
                        for i in ids:
                            self._load[i] += ticket.weight
                        return ids
                    self._cond.wait(timeout=0.5)
                return None
            finally:
                if self._queue[0] is ticket:
                    self._bypassed = 0
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next waiter may now be at the head

    def release(self, ids: list[int], weight: int = 1) -> None:
        weight = slots.capped(len(ids), weight, len(self._load), self._per_gpu)[1]
        with self._cond:
            for i in ids:
                self._load[i] -= weight
            self._cond.notify_all()


class WorkerPool:
    """Named worker threads pulling trials from one queue; first worker exception stops the rest.

    `run_fn(trial, artefacts)` runs one trial and returns its record (`run_local`: a subprocess
    here; a Ray backend's: a task on a cluster); on Ctrl-C or SIGTERM `kill_running()` ends every
    trial in flight (`kill_child_groups`: the local trials' process groups)."""

    def __init__(
        self,
        *,
        spec,
        pending,
        states,
        store,
        gpus,
        lines,
        need_gpus,
        run_fn,
        attempts=None,
        expected_s=None,
        kill_running=None,
    ) -> None:
        self.spec = spec
        self.pending = collections.deque(pending)
        self.states = states
        self.store = store
        self.gpus = gpus
        self.lines = lines
        self.need_gpus = need_gpus
        self.run_fn = run_fn
        self.kill_running = kill_running or kill_child_groups
        self.attempts = collections.Counter(attempts or ())
        """Stored records per trial id: a rerun (an out-of-memory trial) gets its own artefacts."""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.results: list[TrialResult] = []
        self.left = 0
        """Trials not run: ended by a cell's stop rule (max failures) or by the clock (left_by_time)."""
        self.left_by_time = 0
        """Of `left`, those not started because --max-time passed (or the pool was stopped: then
        run() raises, and nobody reads it)."""
        self.lost = 0
        """Trials whose run_fn raised TrialNotRun (not late): nothing stored, a resume runs them."""
        self.running = 0
        self._loop: WorkLoop | None = None
        self.deadline = None if spec.max_time_s is None else time.monotonic() + spec.max_time_s
        self.finish_by = None if spec.finish_by_s is None else time.monotonic() + spec.finish_by_s
        self.expected_s: dict[str, float | None] = dict(expected_s or {})
        """Per cell, its stored median duration (MatrixSpec.finish_by_s)."""

    def run(self) -> list[TrialResult]:
        """Every pending trial through the loop; Ctrl-C or SIGTERM kills the trials in flight, stores
        none of them (an interrupted measurement, not an ABORT: a resume runs them) and raises
        KeyboardInterrupt once the workers are joined."""
        longest = max((c.timeout_s for c in self.spec.workloads.values()), default=0.0)
        loop = WorkLoop(
            "worker",
            workers=min(self.spec.workers, len(self.pending)),
            take=self._next,
            work=self._work,
            longest_s=longest,
            kill_running=self.kill_running,
            tick=lambda: self.lines.tick(len(self.results), self.running, len(self.pending)),
            on_interrupt="they will rerun on resume",
            unit="trial",
        )
        self.stop, self._loop = loop.stop, loop
        loop.run()
        if loop.interrupted:
            raise KeyboardInterrupt
        return self.results

    @property
    def interrupted(self) -> bool:
        return self._loop is not None and self._loop.interrupted

    def _stopped(self, trial: TrialSpec) -> bool:
        return self.states[trial.cell].stopped(self.spec.max_failures)

    def _late(self, trial: TrialSpec) -> bool:
        """Past --max-time, or its cell's median would not end it by --finish-by."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return True
        expected = self.expected_s.get(trial.cell)
        return self.finish_by is not None and expected is not None and now + expected > self.finish_by

    def _leave(self, trial: TrialSpec) -> None:
        """Count a trial not run (under self.lock): to its cell's stop rule if that has ended the
        cell, else to the clock."""
        self.left += 1
        if self._stopped(trial):
            self.states[trial.cell].skipped_by_rule += 1
        else:
            self.left_by_time += 1

    def _not_run(self, trial: TrialSpec, e: TrialNotRun) -> None:
        """A trial run_fn gave back without a record (under self.lock): late ones count as left
        by the clock, lost ones apart; either reruns on resume."""
        if e.late:
            self._leave(trial)
            return
        self.lost += 1
        print(
            f"{trial.trial_id}: not run to the end, nothing stored ({e}); it reruns on resume",
            file=sys.stderr,
            flush=True,
        )

    def _next(self) -> tuple[TrialSpec, Ticket | None] | None:
        """The next trial to run, already in GpuSlots' queue (in pop order: `GpuSlots.enqueue`)."""
        with self.lock:
            while self.pending and not self.stop.is_set():
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    break
                trial = self.pending.popleft()
                if self._stopped(trial) or self._late(trial):  # a shorter cell's trial may still fit
                    self._leave(trial)
                    continue
                return trial, self.gpus.enqueue(*self.need_gpus[trial.cell])
            for trial in self.pending:  # what the clock cut, or the rule had already ended
                self._leave(trial)
            self.pending.clear()
            return None

    def _work(self, popped: tuple[TrialSpec, Ticket | None]) -> None:
        trial, ticket = popped
        need, weight = self.need_gpus[trial.cell]
        ids = self.gpus.acquire(need, self.stop, weight, ticket=ticket)
        if ids is None or not self._start(trial, ids, weight):
            return  # stopped while waiting (the loop then takes nothing more), or left by the clock
        result, not_run = self._run_one(trial, ids, weight)
        self._finish(trial, result, not_run)

    def _start(self, trial: TrialSpec, ids: list[int], weight: int) -> bool:
        """Whether the trial may still start now that it holds its GPU slots (released if not)."""
        with self.lock:
            # A trial popped before the deadline may wait minutes for a GPU slot; it must
            # not start after --max-time (an H200 run overran its budget that way), nor
            # after its cell's stop rule ended the cell while it waited.
            late = self._stopped(trial) or self._late(trial)
            if late:
                self._leave(trial)
            else:
                self.running += 1
        if late:
            self.gpus.release(ids, weight)
        return not late

    def _run_one(self, trial: TrialSpec, ids: list[int], weight: int) -> tuple[TrialResult | None, TrialNotRun | None]:
        """The trial's result, or why it did not run; its GPU slots are released either way."""
        not_run = None
        try:
            if ids:
                trial.env = {**trial.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))}
            artefacts = self.store.artefacts_dir(trial.trial_id, self.attempts.get(trial.trial_id, 0))
            result = self.run_fn(trial, artefacts)
        except TrialNotRun as e:
            result, not_run = None, e
            with contextlib.suppress(OSError):  # its folder stays only if a file came back
                artefacts.rmdir()
        finally:
            self.gpus.release(ids, weight)
        return result, not_run

    def _finish(self, trial: TrialSpec, result: TrialResult | None, not_run: TrialNotRun | None) -> None:
        """Store and count the result; nothing once the pool is interrupted (the loop then stops)."""
        with self.lock:
            self.running -= 1
            if self.interrupted:
                return
            if result is None:
                self._not_run(trial, not_run)
                return
            self.store.append(result)
            self.results.append(result)
            self.states[trial.cell].add(result)
            self.lines.update(self.states[trial.cell])
