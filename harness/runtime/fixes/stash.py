"""Fixes of torch's C++ TLS stash (`torch._C._stash_obj_in_tls`): the reference the binding keeps
without taking it (stash-incref), and the objects it drops after join() returns (await-thread-exit)."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any

from harness.runtime import thread_exit
from harness.runtime.fixes.base import Fix, patch_once


class StashIncref(Fix):
    """Give every `torch._C._stash_obj_in_tls(key, obj)` a reference of its own to obj.

    The binding wraps the borrowed argument in a c10::SafePyObject, whose constructor "steals a
    reference", without an incref (torch/csrc/Module.cpp at pytorch commit 00029b2949c9; its release
    not established); the SafePyObject decrefs once when the thread's C++ TLS map dies (thread exit)
    or the key is stashed again. So when a thread that stashed exits, the object loses a reference
    it never got: cudagraph_trees' per-thread dicts, owned only by that thread's `local`, are freed
    twice (repro r22), and the heap corruption surfaces later as a native crash anywhere (families
    segv and segv-gc). The hypothesis behind the heap corruption of cstash-tls-init's cells: they
    stash in every pipeline thread, and the prefetch and target threads exit before the drafters
    finish (r22 confirmed the lost reference on the H200's 2.11, 20/20, 2026-12-01). The patch
    measures the binding once, on a private probe object: if it keeps a reference it did not take,
    every stash gets one first (Py_IncRef); where the binding increfs (2.13, measured) the binding
    stays as it is. Patched once per process, by the first thread that starts; FixSet runs it before
    the other fixes so that their imports of cudagraph_trees (whose module body stashes) go through
    it. PR #89169 (the stash), #126934 (stashed TLS "gc'd"), PR #180295.
    """

    name = "stash-incref"
    targets = ("segv", "segv-gc")
    upstream = ("#89169", "#126934", "#180295")
    early = True

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        return patch_once(torch._C, "_stash_obj_in_tls", _balanced_stash, self.name)


_STASH_PROBES: list[Any] = []
"""Objects stashed once to measure a binding (kept alive: a stealing binding drops a reference to
each when the probing thread exits, and the probe gives it one to drop)."""


def _stash_steals(stash: Callable[[str, Any], None]) -> bool:
    """Whether `stash` keeps a reference it did not take, measured on a fresh object no other thread
    can reach. Measuring each call on the object being stashed would race: another thread's stash
    or exit moves a shared object's count between the two readings (r22's compile-chaos runs on
    the H200 read "[-1, 0]" for that reason, 2026-12-01)."""
    probe = type("StashProbe", (), {})()
    _STASH_PROBES.append(probe)
    before = sys.getrefcount(probe)
    stash(f"harness_stash_probe_{len(_STASH_PROBES)}", probe)
    steals = sys.getrefcount(probe) == before
    if steals:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(probe))
    return steals


def _balanced_stash(stash: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    if not _stash_steals(stash):
        # The binding takes its own reference (2.13): nothing to add. Still a wrapper, which carries
        # the patch's mark so that the probe runs once per process.
        def stash_as_is(key: str, obj: Any) -> None:
            stash(key, obj)

        return stash_as_is

    def balanced_stash(key: str, obj: Any) -> None:
        # The reference the binding keeps: taken before the call, so that nothing between the call
        # and an incref after it can see the count short.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        try:
            stash(key, obj)
        except BaseException:
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(obj))
            raise

    return balanced_stash


class AwaitThreadExit(Fix):
    """Make interpreter exit wait until every thread that started under it has left the OS.

    join() returns before a thread's C++ thread_local destructors run; torch's C stash
    (`_stash_obj_in_tls`: CUDAGraph Trees' per-thread dicts, cstash-tls-init) drops its objects
    there under the GIL, and a destructor that asks for the GIL after finalization has begun is
    ended inside a noexcept frame: SIGABRT at exit, `terminate called without an active exception`
    (race stash-exit-finalize, repro r26). An atexit hook (run before finalization) waits for those
    OS threads, 5 s at most (harness.runtime.thread_exit; Linux). PR #89169 (the stash); #38228 and #117762 (a thread taking the
    GIL during finalization aborts); CPython gh-87135 (3.14 blocks such a thread instead).
    """

    name = "await-thread-exit"
    targets = ("stash-exit-finalize",)
    upstream = ("#89169", "#38228", "#117762", "cpython#87135")

    def thread_start(self, role: str) -> bool:
        thread_exit.watch_current()
        return True
