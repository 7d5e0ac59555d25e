"""r22_stash_tls_refcount: a C-stashed object loses a reference when its thread exits.

Symptom: none at the time. After a thread that called `torch._C._stash_obj_in_tls(key, obj)`
  exits, obj's reference count is one lower than before the call. An object that thread alone
  owned (cudagraph_trees' per-thread `tree_manager_containers` / `tree_manager_locks` dicts,
  stashed by cudagraph_trees' module body in the importing thread and by the cstash-tls-init fix
  in every pipeline thread) is freed twice: heap corruption, and later segfaults in any thread,
  often in the GC (`PyObject_GC_UnTrack`). Printed here as a WRONG_RESULT, measured exactly.
Mechanism: the binding (torch/csrc/Module.cpp) wraps the borrowed `py::handle` in a
  c10::SafePyObject, whose constructor "steals a reference", without an incref; the holder
  decrefs once when the thread's C++ thread_local map is destroyed (after the Python thread has
  finished: join() returns before it) or when the key is stashed again.
Trigger: --threads threads each stash one shared object and exit; compare its refcount before
  the first and after the last thread is gone. Deterministic; not a race, but the threads'
  exits are what the trainer's pipeline does when the prefetcher runs out of batches. With
  --churn N, what it costs: short-lived threads stash their own dicts beside N allocating
  threads (a race between the freed dict's reuse and the thread's C++ destructor); on a torch
  whose stash takes its reference, --emulate-steal makes it behave as the reading predicts.
Affected versions: the source read (torch/csrc/Module.cpp at pytorch commit 00029b2949c9, its
  release not established); torch 2.13 (CPU) keeps a reference of its own (NOT REPRODUCED
  here); torch 2.11 (one H200): 20/20 WRONG_RESULT, stash-incref 0/20 (repro/README.md).
Fix: stash-incref (harness.runtime.fixes: wraps the stash and adds the missing reference when the
  refcount did not rise; a no-op where the binding increfs).
Upstream: PR #89169 (the stash API), #126934 ("TLS is gc'd between unit test cudagraph runs"),
  PR #180295 ("Work around possible bug in _stash_obj_in_tls").
"""

import argparse
import faulthandler
import os
import sys
import threading
import time

from _common import beat, run_threads, setup


def settle(count, base, want, timeout_s=5.0):
    """count() - base once it equals `want` or the deadline passes: a thread's C++ thread_local
    destructors run after join() has returned. `count` reads the refcount from the caller's
    closure: passing the object in would add this frame's reference to every reading."""
    deadline = time.monotonic() + timeout_s
    while count() - base != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return count() - base


def emulate_steal(torch):
    """This torch's stash as the binding reads in that source: holding a reference it
    never took (the one this torch's stash took, if it took one, is dropped at once)."""
    real = torch._C._stash_obj_in_tls

    def stealing_stash(key, obj):
        import ctypes

        before = sys.getrefcount(obj)
        real(key, obj)
        if sys.getrefcount(obj) > before:
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(obj))

    torch._C._stash_obj_in_tls = stealing_stash


CHURN_JOIN_S = 30.0
"""Deadline for the churn threads once the stashing threads are done."""


def churn_run(torch, fs, args):
    """What the refcount costs: --threads short-lived threads, one after another, each stash its
    own thread-local dicts as cudagraph_trees and cstash-tls-init do, and exit, while --churn
    threads allocate and collect. A stash that keeps a reference it did not take frees those
    dicts twice; the memory is soon another object's, and the process dies in the GC."""
    import gc

    local, stop, corrupt = threading.local(), threading.Event(), []

    def churn():
        fs.thread_start("churn")
        try:
            while not stop.is_set():
                junk = [{i: [i]} for i in range(200)]  # noqa: F841
                gc.collect(0)
                beat()
        except Exception as exc:  # a corrupted object surfacing as a Python error
            corrupt.append(exc)

    def short_lived():
        fs.thread_start("worker")
        local.containers, local.locks = {}, {0: threading.Lock()}
        torch._C._stash_obj_in_tls("tree_manager_containers", local.containers)
        torch._C._stash_obj_in_tls("tree_manager_locks", local.locks)

    churners = [threading.Thread(target=churn, name=f"repro-churn-{i}") for i in range(args.churn)]
    for t in churners:
        t.start()
    errors = {}
    for i in range(args.threads):
        errors.update(run_threads({f"repro-stash-{i}": short_lived}, deadline_s=30))
    time.sleep(0.5)  # the last threads' C++ destructors run after join()
    stop.set()
    end = time.monotonic() + CHURN_JOIN_S
    for t in churners:
        t.join(timeout=max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in churners):
        # A churn thread stuck past its deadline (a corrupted heap can deadlock as well as crash):
        # say so with every stack, as run_threads does, instead of hanging at interpreter exit.
        print(f"HANG: churn threads still alive after {CHURN_JOIN_S} s", file=sys.stderr)
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)
    if corrupt or errors:
        first = corrupt[0] if corrupt else next(iter(errors.values()))
        print(
            f"WRONG_RESULT: stash-tls-refcount: heap corrupted after {args.threads} thread exits "
            f"({type(first).__name__}: {first}), torch {torch.__version__}"
        )
        return 1
    print(
        f"NOT REPRODUCED (survived {args.threads} stashing thread exits beside {args.churn} allocating "
        f"threads, torch {torch.__version__})"
    )
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--threads", type=int, default=None, help="threads that stash and exit (default 4; 200 with --churn)"
    )
    p.add_argument(
        "--churn",
        type=int,
        default=0,
        help="allocating threads beside the stashing ones: what the lost reference costs",
    )
    p.add_argument(
        "--emulate-steal",
        action="store_true",
        help="make this torch's stash keep a reference it did not take (for a torch that "
        "takes one: shows the consequence the reading predicts)",
    )
    args, fs = setup(p)
    args.threads = args.threads if args.threads is not None else (200 if args.churn else 4)
    if args.threads < 1 or args.churn < 0:
        p.error("--threads must be >= 1 and --churn >= 0")
    import torch

    if args.emulate_steal:
        emulate_steal(torch)
    fs.thread_start("main")
    if args.churn:
        return churn_run(torch, fs, args)

    class Stashed:
        """Kept alive by `owners` (one reference per thread and more), so that the references
        being counted cannot free it inside this script."""

    obj = Stashed()
    owners = [obj] * (2 * args.threads + 2)  # noqa: F841
    at_stash = {}

    def worker():
        fs.thread_start("worker")
        before = sys.getrefcount(obj)
        torch._C._stash_obj_in_tls("r22_stashed", obj)
        at_stash[threading.current_thread().name] = sys.getrefcount(obj) - before
        beat()

    count = lambda: sys.getrefcount(obj)  # noqa: E731 - reads obj through main's cell, as base does
    base = count()
    errors = run_threads({f"repro-stash-{i}": worker for i in range(args.threads)}, deadline_s=60)
    if errors:
        return 1
    taken = set(at_stash.values())
    # Each thread's stash either took a reference (+1, given back at exit: net 0) or did not (0,
    # one taken at exit: net -1 per thread).
    lost = -settle(count, base, 0 if taken == {1} else -args.threads)
    if lost > 0:
        print(
            f"WRONG_RESULT: stash-tls-refcount: {lost} reference(s) lost over {args.threads} thread exits "
            f"(the stash took {sorted(taken)} per call), torch {torch.__version__}"
        )
        return 1
    print(
        f"NOT REPRODUCED (the stash took {sorted(taken)} reference per call and each thread's exit "
        f"gave it back: {args.threads} threads, torch {torch.__version__})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
