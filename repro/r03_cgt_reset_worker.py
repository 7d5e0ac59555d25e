"""r03_cgt_reset_worker: torch.compiler.reset() on a worker thread asserts (2.10) or frees nothing (2.11).

Symptom: 2.10: `AssertionError` (empty) at cudagraph_trees `get_obj` from
  `torch.compiler.reset -> _reset_guarded_backend_cache -> reset_cudagraph_trees` on a thread
  that did not import cudagraph_trees. 2.11: no error, but the worker's tree manager and its
  private memory pool are NOT freed: a silent no-op reset (a leak across rollouts / models).
Mechanism: 2.11 `reset_cudagraph_trees` starts with `if not torch._C._is_key_in_tls(
  "tree_manager_containers"): return`; a thread seeded through the Python `local` only has no C
  stash key, so its containers survive the reset (F1b).
Trigger: main imports cudagraph_trees; a worker seeds the Python local (common workaround),
  runs a reduce-overhead function (creates its own tree manager), then calls
  `torch.compiler.reset()` on itself. Deterministic by reading the code (2.11); 2.10 reports:
  openmm/openmm-ml#128, flexivtrainer write-up (new planner thread per rollout).
Affected versions: 2.10 (assert), 2.11 (silent no-op, read + probe: no exception).
Fix: cstash-tls-init (the C stash key makes the reset really reset this thread's trees).
  Observed on the H200 (2.11): the reset DID free the worker's trees although the C key was
  absent (2/2 runs): the silent no-op predicted from the code was not confirmed.
Upstream: PR #171879 (reset_cudagraph_trees in dynamo.reset), #123177, PR #184357.
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup


def need_cuda(torch):
    if not torch.cuda.is_available():
        print("SKIP: needs CUDA")
        sys.exit(0)


def tls_assert(exc):
    """True for the F1 signature: AssertionError raised in cudagraph_trees.get_obj."""
    tb = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, AssertionError) and any(
        fr.name == "get_obj" and fr.filename.endswith("cudagraph_trees.py") for fr in tb
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3, help="reduce-overhead calls before the reset")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import collections

    import torch._inductor.cudagraph_trees as cgt  # the main thread becomes the importer

    left = {}

    def worker():
        fs.thread_start("worker")
        if not hasattr(cgt.local, "tree_manager_containers"):  # the common partial workaround
            cgt.local.tree_manager_containers = {}
            cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)
        fn = torch.compile(lambda x: torch.sin(x) + 1, mode="reduce-overhead")
        x = torch.randn(8, device="cuda")
        with torch.no_grad(), fs.around_call():
            for _ in range(args.calls):
                fn(x)
        torch.cuda.synchronize()
        left["stash"] = torch._C._is_key_in_tls("tree_manager_containers")
        left["before"] = sum(c.tree_manager is not None for c in cgt.local.tree_manager_containers.values())
        torch.compiler.reset()
        left["after"] = sum(c.tree_manager is not None for c in cgt.local.tree_manager_containers.values())
        beat()

    errors = run_threads({"repro-worker": worker}, deadline_s=480)
    if any(tls_assert(exc) for exc in errors.values()):
        print("REPRODUCED: AssertionError: (empty) at cudagraph_trees.get_obj from torch.compiler.reset()")
        return 1
    if errors:
        return 1
    if left["before"] and left["after"]:
        print(
            f"WRONG_RESULT: torch.compiler.reset() on the worker left {left['after']} cudagraph tree "
            "manager(s) alive (silent no-op reset: no C TLS key)"
        )
        return 1
    print(
        f"NOT REPRODUCED (tree managers before reset {left['before']}, after {left['after']}; "
        f"C TLS key present: {left['stash']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
