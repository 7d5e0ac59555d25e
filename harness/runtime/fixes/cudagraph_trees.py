"""Fixes of CUDAGraph Trees' per-thread state: seeding its thread-locals (local-tls-init), its
C++ TLS stash too (cstash-tls-init), and one lock around its manager's run (cudagraph-lock)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from harness.runtime import thread_exit
from harness.runtime.fixes.base import Fix, patch_once

TLS_KEYS = ("tree_manager_containers", "tree_manager_locks")


def _cudagraph_trees() -> Any:
    # Importable on CPU builds too; the import runs the TLS init for the importing thread only,
    # which is the root of F1.
    import torch._inductor.cudagraph_trees as cgt

    return cgt


def _seed_local(cgt: Any) -> bool:
    if all(hasattr(cgt.local, key) for key in TLS_KEYS):
        return False

    # Same two attributes the module body sets in the importing thread (2.11 lines 309-310).
    cgt.local.tree_manager_containers = {}
    cgt.local.tree_manager_locks = defaultdict(threading.Lock)
    return True


class LocalTlsInit(Fix):
    """Seed cudagraph_trees.local (tree_manager_containers/locks) in the thread if missing.

    The common partial workaround: a fresh thread gets its own tree manager, so a reduce-overhead
    forward no longer asserts at `torch._C._is_key_in_tls` (F1). Not enough for backward on the
    autograd device thread (it reads the C stash). Issue #123177, PR #184357.
    """

    name = "local-tls-init"
    targets = ("F1",)
    upstream = ("#123177", "#184357")

    def thread_start(self, role: str) -> bool:
        return _seed_local(_cudagraph_trees())


class CstashTlsInit(Fix):
    """local-tls-init plus `torch._C._stash_obj_in_tls` for both keys (if missing).

    The thread then looks like the importing one: the autograd engine copies the C stash into its
    worker threads, so the backward of this thread's cudagraphed graph finds this thread's manager
    (F1 via backward) and reset_cudagraph_trees() on this thread really resets it (F1b). The stash is dropped after the
    thread's join() returns, so interpreter exit waits for such threads as await-thread-exit does
    (r26). Issues #123177, #126934, PR #136735, PR #184357.
    """

    name = "cstash-tls-init"
    targets = ("F1", "F1b")
    upstream = ("#123177", "#126934", "#136735", "#184357")

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        cgt = _cudagraph_trees()
        acted = _seed_local(cgt)
        for key in TLS_KEYS:
            if not torch._C._is_key_in_tls(key):
                torch._C._stash_obj_in_tls(key, getattr(cgt.local, key))
                acted = True
        # The stash (this fix's, or cudagraph_trees' module body's when this thread imported it)
        # is dropped after join() returns; exit waits for that (r26).
        thread_exit.watch_current()
        return acted


CUDAGRAPH_LOCK = threading.RLock()


class CudagraphLock(Fix):
    """One process-wide RLock around `CUDAGraphTreeManager.run`: record, warm-up and replay of
    every cudagraph tree, the device thread's backward included, one at a time.

    The narrow form of PR #184357's `graph_capture_lock` ("serializing graph capture and
    private-pool warmup paths"), which torch 2.11 lacks. On the H200 campaign
    (docs/log/2026-11-29-h200-campaign-first-115-trials.md) the C-stash init got the trainer past
    F1, then concurrent recordings collided: `beginAllocateToPool: already recording to mempool_id`
    (F1c) and one thread's `synchronize` inside another's capture (`operation not permitted when
    stream is capturing`, F1d's message). Unlike global-lock it leaves Dynamo, the eager parts of a
    step and the optimizer concurrent; a replay holds it only while launching. Does not answer F1
    itself (pair with cstash-tls-init) nor outputs overwritten by another thread's later replay
    (F1c: pair with graph-isolation). Installed once per process by the first thread that starts.
    Part of the concurrent configuration REPORT.md measured clean on launch-bound (one H200).
    """

    name = "cudagraph-lock"
    targets = ("F1c", "F1d")
    upstream = ("#184357", "#184432")

    def thread_start(self, role: str) -> bool:
        return patch_once(_cudagraph_trees().CUDAGraphTreeManager, "run", _locked, self.name)


def _locked(run: Callable) -> Callable:
    def locked_run(self, *args: Any, **kwargs: Any) -> Any:
        with CUDAGRAPH_LOCK:
            return run(self, *args, **kwargs)

    locked_run.__doc__, locked_run.__name__, locked_run.__qualname__ = run.__doc__, run.__name__, run.__qualname__
    return locked_run
