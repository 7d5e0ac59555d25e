"""global-lock: one process-wide lock around every compiled call and backward, and the lock
scopes that let threads started inside a locked call help it instead of waiting on it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harness.runtime.fixes.base import Fix, patch_once

# One process-wide lock for the global-lock fix. A thread's nested calls (a compiled forward that
# runs a backward) are counted in its Hold, never taken twice; and a plain Lock, unlike an RLock,
# may be released by the thread where a call ends: a generator suspended inside `guard.call()`
# and closed, or collected, on another thread.
_LOCK = threading.Lock()


class GlobalLock(Fix):
    """One process-wide lock around every compiled call and backward.

    Serialises compile, cudagraph record/replay and lazy backward compile (F1c, F1d, F7, F8, F10;
    F2/F3 only when every tracer in the process also runs under the lock). Removes concurrency:
    the control arm. Upstream PR #184357 does the narrow version (graph_capture_lock), PR #184432.
    H200 / torch 2.11 runs (repro/README.md): holds for r05 (F1d), not for r04 (F1c: two threads
    still share one recorded graph, serialized or not). A thread started inside a locked call (a
    pool that compiles for it: pytorch#168042's backend runs compile_fx in 50 workers) takes that
    call's own lock instead (LockScope), so the holder never waits on helpers that wait on it.
    """

    name = "global-lock"
    targets = ("F1c", "F1d", "F2", "F3", "F7", "F8", "F10")
    upstream = ("#184357", "#184432")

    def enter(self) -> Hold:
        hold = _hold()
        if hold.depth:
            hold.depth += 1  # nested on this thread: already ordered
            return hold
        # A thread started inside a locked call takes that call's own lock, not the global one: the
        # holder may wait on it (a compile's pool), so it must not wait on the holder; helpers still exclude each other.
        patch_once(threading.Thread, "start", _scoped_start, GlobalLock.name)
        took = _acquire_scope(_birth_scope())
        hold.depth, hold.scope = 1, LockScope(threading.Lock(), parent=took)
        return hold

    def exit(self, token: Hold) -> None:
        # The entering thread's Hold, wherever the call ends (see GLOBAL_LOCK).
        token.depth -= 1
        if token.depth:
            return
        scope, token.scope = token.scope, None
        with scope.lock:  # a helper inside a guarded section finishes it first
            scope.open = False
        scope.parent.lock.release()


class Hold:
    """One thread's guarded calls: their `depth`, and the LockScope its outermost call opened."""

    __slots__ = ("depth", "scope")

    def __init__(self) -> None:
        self.depth = 0
        self.scope: LockScope | None = None


class LockScope:
    """A global-lock holder's outermost call, as a lock of its own: the threads it starts inside the
    call (and theirs) take `lock` instead of the one the holder took while the call is open.

    The holder may wait on such helpers (a ThreadPoolExecutor created for a compile); were they to
    take the global lock, holder and helpers would wait on each other for ever. Helpers therefore
    run one at a time beside their holder, and every other thread still waits for the holder; once
    the call ends a helper takes its holder's lock again (the scope's parent)."""

    __slots__ = ("lock", "open", "parent")

    def __init__(self, lock: Any, parent: LockScope | None) -> None:
        self.lock = lock
        self.open = True
        self.parent = parent


_ROOT_SCOPE = LockScope(_LOCK, parent=None)
_held = threading.local()
"""Per thread: `hold`, its Hold."""
_SCOPE_ATTR = "_harness_lock_scope"


def _hold() -> Hold:
    hold = getattr(_held, "hold", None)
    if hold is None:
        hold = _held.hold = Hold()
    return hold


def _birth_scope() -> LockScope:
    return getattr(threading.current_thread(), _SCOPE_ATTR, None) or _ROOT_SCOPE


def _acquire_scope(scope: LockScope) -> LockScope:
    """Take the lock of the nearest open scope from `scope` up; the root (the global lock) never closes."""
    while True:
        while not scope.open:
            scope = scope.parent  # type: ignore[assignment]
        scope.lock.acquire()
        if scope.open:
            return scope
        scope.lock.release()  # closed while this thread waited: its holder's lock is next


def _scoped_start(start: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    def start_in_scope(self: threading.Thread) -> None:
        # A thread started inside a locked call helps that call; one started by a helper, its holder.
        hold = _hold()
        setattr(self, _SCOPE_ATTR, hold.scope if hold.depth else getattr(threading.current_thread(), _SCOPE_ATTR, None))
        start(self)

    return start_in_scope


class ProgramLock:
    """The global-lock fix's lock as a program takes it (`with GLOBAL_LOCK:` around its own
    `torch._dynamo.reset()` or capture): a guarded section of this thread like a compiled call's,
    so a compiled call made inside it is nested instead of waiting on its own thread for ever."""

    def __init__(self) -> None:
        self._fix = GlobalLock()

    def __enter__(self) -> None:
        self._fix.enter()

    def __exit__(self, *exc: object) -> None:
        self._fix.exit(_hold())

    @staticmethod
    def locked() -> bool:
        """Whether some thread holds the global lock (a compiled call, or a program's section)."""
        return _LOCK.locked()


GLOBAL_LOCK = ProgramLock()
