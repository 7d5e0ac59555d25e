"""Who gets GPU slots next: the pool's admission rule, and a replay of it to plan GPU time.

`GpuSlots` (harness/campaign/matrix/pool.py) asks `admit` under its lock each time a waiter wakes; `simulate`
runs the same rule over trials of known length on a virtual clock, so that `--pending` can say how
long a run's pending trials will take as the pool will actually pack them, not only the bound
perfect packing gives (runs planned for 4-6 trials at once ran 2 at once).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


def free_gpus(load: Sequence[int], per_gpu: int, need: int, weight: int) -> list[int] | None:
    """The `need` least-loaded GPUs with room for `weight` more slots, or None."""
    free = sorted((n, i) for i, n in enumerate(load) if n + weight <= per_gpu)
    return sorted(i for _, i in free[:need]) if len(free) >= need else None


def admit(
    queue: Sequence[tuple[int, int]], k: int, load: Sequence[int], per_gpu: int, *, bypassed: int, max_bypass: int
) -> list[int] | None:
    """GPU ids for waiter k of `queue` ((need, weight) pairs, first come first), or None.

    The head starts when it fits. A later waiter starts ahead of it when it fits, no waiter before
    it does (so the ones behind the head are served in their order too, whichever thread wakes
    first), and fewer than `max_bypass` waiters have passed this head already (bounded backfill:
    unbounded, a big trial waits as long as small ones keep taking each slot the moment it frees)."""
    need, weight = queue[k]
    ids = free_gpus(load, per_gpu, need, weight)
    if ids is None or k == 0:
        return ids
    if bypassed >= max_bypass:
        return None
    earlier_fits = any(free_gpus(load, per_gpu, *queue[j]) is not None for j in range(k))
    return None if earlier_fits else ids


def capped(need: int, weight: int, num_gpus: int, per_gpu: int) -> tuple[int, int]:
    """(GPUs, slots on each) a trial takes: at most every GPU there is and one GPU's slots (a
    cell asking for more would never start). GpuSlots and `simulate` both cap with this, so the
    replay packs as the pool does."""
    return min(need, num_gpus), min(weight, per_gpu)


@dataclass(frozen=True, slots=True)
class Job:
    """One pending trial as the pool sees it: seconds it will take, GPUs and slots on each."""

    seconds: float
    need: int = 0
    """GPUs it takes (0: a CPU trial, which waits for a worker only)."""
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Replay:
    wall_s: float
    """Seconds until the last job ended."""
    starts: tuple[float, ...]
    """When each job started, in the order given."""


def simulate(
    jobs: Sequence[Job], *, workers: int, num_gpus: int, per_gpu: int, max_bypass: int | None = None
) -> Replay:
    """`jobs` (in the pool's order) run as WorkerPool runs them, on a virtual clock: `workers`
    threads each take the next job and wait in GpuSlots' queue for its slots (`admit`).
    max_bypass None is GpuSlots' default (one GPU's slots); 0 is strict order."""
    max_bypass = per_gpu if max_bypass is None else max_bypass
    load = [0] * num_gpus
    todo = list(reversed(list(enumerate(jobs))))
    starts = [0.0] * len(jobs)
    queue: list[tuple[int, Job]] = []
    running: list[tuple[float, int, list[int], int]] = []  # (end, job number, gpu ids, weight)
    now, bypassed = 0.0, 0
    while todo or queue or running:
        while todo and len(queue) + len(running) < workers:
            queue.append(todo.pop())
        k = 0
        while k < len(queue):
            n, job = queue[k]
            ids, bypassed = _admit_at(queue, k, load, num_gpus, per_gpu, bypassed, max_bypass)
            if ids is None:
                k += 1
                continue
            weight = capped(job.need, job.weight, num_gpus, per_gpu)[1]
            for i in ids:
                load[i] += weight
            heapq.heappush(running, (now + job.seconds, n, ids, weight))
            starts[n] = now
            queue.pop(k)
            while todo and len(queue) + len(running) < workers:
                queue.append(todo.pop())
            k = 0  # a start changes who may start next: look again from the head
        if not running:  # nothing runs and nothing starts: the rule or the arguments are wrong
            raise ValueError(
                f"simulate: {len(todo) + len(queue)} job(s) can never start "
                f"(workers {workers}, {num_gpus} GPU(s) of {per_gpu} slots)"
            )
        now, _, ids, weight = heapq.heappop(running)
        for i in ids:
            load[i] -= weight
    return Replay(wall_s=now, starts=tuple(starts))


def _admit_at(
    queue: list[tuple[int, Job]], k: int, load: list[int], num_gpus: int, per_gpu: int, bypassed: int, max_bypass: int
) -> tuple[list[int] | None, int]:
    """GpuSlots' answer for the k-th queued job (its GPU ids, or None: it waits) and the count of
    jobs that have started ahead of the head of the queue."""
    job = queue[k][1]
    if job.need == 0 or not num_gpus:
        return [], bypassed
    pairs = [capped(j.need, j.weight, num_gpus, per_gpu) for _, j in queue if j.need]
    # GpuSlots' queue holds only the jobs that need GPUs; find this one's place in it.
    g = sum(1 for _, j in queue[:k] if j.need)
    ids = admit(pairs, g, load, per_gpu, bypassed=bypassed, max_bypass=max_bypass)
    if ids is not None:
        bypassed = 0 if g == 0 else bypassed + 1
    return ids, bypassed


def strict_and_backfill(jobs: Sequence[Job], *, workers: int, num_gpus: int, per_gpu: int) -> dict[str, float]:
    """Wall seconds of `jobs` in strict order (max_bypass 0) and with GpuSlots' bounded backfill."""
    return {
        name: simulate(jobs, workers=workers, num_gpus=num_gpus, per_gpu=per_gpu, max_bypass=b).wall_s
        for name, b in (("strict", 0), ("backfill", None))
    }
