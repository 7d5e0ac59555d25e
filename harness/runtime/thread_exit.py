"""Waiting until a joined thread has left the OS, not only Python.

`Thread.join()` returns when the thread's Python state is gone; the OS thread then still runs its
C++ `thread_local` destructors. torch keeps Python objects there (`torch._C._stash_obj_in_tls`, used
by CUDAGraph Trees in every thread that touches it and by the cstash-tls-init fix): the destructor
takes the GIL to drop them. If the interpreter is finalizing by then, CPython ends that thread
inside the destructor and the process aborts at exit (`terminate called without an active
exception`, or `Fatal Python error: _PyThreadState_DeleteCurrent`; repro r26). Waiting for the OS
thread closes that window. Linux only (`/proc/self/task`); elsewhere the wait is a no-op.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

TASKS = "/proc/self/task"
DEFAULT_TIMEOUT_S = 5.0

_lock = threading.Lock()
_watched: set[int] = set()
"""Native ids of the threads exit waits for; the atexit hook is registered with the first."""


def supported() -> bool:
    return os.path.isdir(TASKS)


def os_thread_alive(native_id: int) -> bool:
    return os.path.exists(f"{TASKS}/{native_id}")


def wait_gone(native_ids: set[int] | frozenset[int], timeout_s: float = DEFAULT_TIMEOUT_S) -> set[int]:
    """Wait until none of the OS threads `native_ids` exists; the ones still there at the deadline.
    Sleeps between looks, which releases the GIL the exiting threads' destructors need."""
    # Without /proc no thread reads as alive: nothing to wait for.
    deadline = time.monotonic() + timeout_s
    left = {n for n in native_ids if os_thread_alive(n)}
    while left and time.monotonic() < deadline:
        time.sleep(0.001)
        left = {n for n in left if os_thread_alive(n)}
    return left


def join(thread: threading.Thread, timeout_s: float | None = None) -> bool:
    """`thread.join(timeout_s)`, then wait (up to the rest of the timeout, or DEFAULT_TIMEOUT_S)
    for its OS thread to be gone; whether it is gone."""
    start = time.monotonic()
    thread.join(timeout_s)
    if thread.is_alive():
        return False
    rest = DEFAULT_TIMEOUT_S if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - start))
    return thread.native_id is None or not wait_gone({thread.native_id}, rest)


def watch_current() -> None:
    """Make interpreter exit wait for this thread's OS exit (an atexit hook, registered once; it
    runs before finalization starts)."""
    with _lock:
        first = not _watched
        _watched.add(threading.get_native_id())
    if first:
        atexit.register(_wait_watched)


def _wait_watched() -> None:
    live = {t.native_id for t in threading.enumerate()}
    with _lock:
        pending = {n for n in _watched if n not in live}
    left = wait_gone(pending)
    if left:
        print(
            f"harness: {len(left)} exited thread(s) still in their C++ thread_local destructors "
            f"after {DEFAULT_TIMEOUT_S:g} s; exiting anyway",
            file=sys.stderr,
        )
