"""phase-lock: exclusive while a call may compile, shared once it has run (a readers-writer
lock keyed by the call's callable and input signature)."""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from typing import Any

from harness.runtime.fixes.base import Fix


class ReadersWriterLock:
    """Shared or exclusive; a waiting writer stops new readers (steady calls never starve a compile)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writers_waiting += 1
                while self._writer or self._readers:
                    self._cond.wait()
                self._writers_waiting -= 1
                self._writer = True
            else:
                while self._writer or self._writers_waiting:
                    self._cond.wait()
                self._readers += 1

    def release(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


# The fix's own lock, not exported for programs: one taken around a guarded call on the same thread
# would wait on itself (the depth that nests calls is the fix's). A program's section takes GLOBAL_LOCK.
PHASE_LOCK = ReadersWriterLock()
PHASE_WARM_CALLS = 3
"""Calls of one callable and input signature that run exclusive: the first compiles (Dynamo,
AOTAutograd's lazy backward, Inductor), and with CUDA-graph trees the first warms up and the
second records; from the third on it replays."""
_phase_local = threading.local()


def _depth() -> list[int]:
    """This thread's count of nested phase-locked calls, in a cell a call's token carries."""
    depth = getattr(_phase_local, "depth", None)
    if depth is None:
        depth = _phase_local.depth = [0]
    return depth


def _graphs_compiled() -> int:
    """Dynamo's process-wide count of graphs compiled (0 before Dynamo is loaded)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    return 0 if dynamo_utils is None else dynamo_utils.counters["stats"]["unique_graphs"]


class PhaseLock(Fix):
    """Exclusive while a call may compile, shared once it has run: steady-state compiled calls
    run concurrently; traces, compiles, CUDA-graph warm-up and recording run alone.

    The phase-scoped form of global-lock. A call's key is its callable and input signature
    (shapes, dtypes); its first PHASE_WARM_CALLS calls take the lock exclusive, later ones
    shared, so an eager forward never meets another thread's trace (F2, F3, R4, r19), first
    compiles and the lazy backward compile never overlap (F7, F8, F10, G2), and no steady call
    waits for another. A compile Dynamo starts during a shared call (a guard that failed on a
    known signature) is counted in `stats()` and sends that key back to exclusive. Upstream
    PR #184357 serialises CUDA-graph capture the same way (graph_capture_lock).

    Not for runs that record CUDA graphs (reduce-overhead): replays of cudagraph-trees share
    process-wide state (output refcounts, the tree's current node), and shared steady calls failed
    5 of 5 stressed launch-bound trials on torch 2.11 (F1c). Keep global-lock there.
    """

    name = "phase-lock"
    unsound_with_cuda_graphs = "shared steady replays failed 5 of 5 stressed launch-bound trials on torch 2.11 (F1c)"
    targets = ("F2", "F3", "F7", "F8", "F10")
    upstream = ("#184357",)
    keyed = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Any, int] = defaultdict(int)
        self._stats = {"exclusive": 0, "shared": 0, "compiles_while_shared": 0}

    def enter(self, key: Any = None) -> Any:
        depth = _depth()
        if depth[0]:
            # Nested in a call this thread already holds the lock for (a compiled forward that
            # runs a backward): already ordered; taking it again could wait on itself.
            depth[0] += 1
            return depth, None
        with self._lock:
            exclusive = key is None or self._calls[key] < PHASE_WARM_CALLS
            self._stats["exclusive" if exclusive else "shared"] += 1
        PHASE_LOCK.acquire(exclusive)
        depth[0] = 1
        return depth, (exclusive, key, _graphs_compiled())

    def exit(self, token: Any) -> None:
        # The entering thread's depth, wherever the call ends: a generator suspended inside
        # `guard.call()` may be closed on another thread (the lock has no owner to check).
        depth, held = token
        depth[0] -= 1
        if held is None:
            return
        exclusive, key, graphs = held
        with self._lock:
            if exclusive:
                self._calls[key] += 1
            elif _graphs_compiled() != graphs:
                self._stats["compiles_while_shared"] += 1
                self._calls[key] = 0
        PHASE_LOCK.release(exclusive)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)
