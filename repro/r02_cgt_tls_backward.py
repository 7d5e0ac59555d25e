"""r02_cgt_tls_backward: cudagraph TLS seeded in Python only -> backward asserts on autograd thread.

Symptom: the forward of a reduce-overhead training step works in a worker thread, then
  `loss.backward()` raises `AssertionError` (empty message) at `assert
  torch._C._is_key_in_tls(attr_name)` in cudagraph_trees `get_obj`, called on the autograd
  device thread (`Dummy-1`), not on the worker.
Mechanism: the widespread workaround seeds `cudagraph_trees.local.tree_manager_containers/locks`
  in the worker (fixes the forward), but backward runs on the autograd engine's device thread,
  which resolves the tree manager through the C++ TLS stash copied from the caller -- empty here
  (F1 via backward).
Trigger: main imports cudagraph_trees; a worker seeds the Python local only (default; --no-seed
  drops it, then the forward asserts as in r01) and trains nn.Linear with mode="reduce-overhead"
  for --steps steps. H200 probe on 2.11 ("train" B): forward ok, backward asserted on Dummy-1.
Affected versions: 2.11 (probe) and every version without PR #184357.
Fix: cstash-tls-init (also stashes in C TLS) or single-thread-autograd (backward on the caller).
Upstream: #123177, #126934, PR #136735, PR #184357, PR #192004.
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


def seed_python_local():
    """The common partial workaround (as local-tls-init does): Python TLS only, no C stash."""
    import collections

    import torch._inductor.cudagraph_trees as cgt

    if not hasattr(cgt.local, "tree_manager_containers"):
        cgt.local.tree_manager_containers = {}
        cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="training steps in the worker")
    p.add_argument("--no-seed", action="store_true", help="skip the Python-local seeding")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401  the main thread becomes the importer

    def worker():
        fs.thread_start("train")
        if not args.no_seed:
            seed_python_local()
        model = torch.nn.Linear(64, 64, device="cuda")
        step = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)  # cudagraph outputs must not feed .grad accumulation
            with fs.around_call():
                step(x).square().mean().backward()
            beat()
        torch.cuda.synchronize()

    errors = run_threads({"repro-train": worker}, deadline_s=480)
    if any(tls_assert(exc) for exc in errors.values()):
        print(
            "REPRODUCED: AssertionError: (empty) at cudagraph_trees.get_obj: assert torch._C._is_key_in_tls(attr_name)"
        )
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED ({len(errors)} failed threads; {args.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
