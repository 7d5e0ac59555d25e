"""r10_checkpoint_cudagraphs: a cudagraphed submodule under non-reentrant checkpoint fails.

Symptom: `RuntimeError: TODO: graph recording observed an input tensor deallocate during graph
  recording that did not occur during replay. Please file an issue.` (cudagraph_trees), on the
  backward/recomputation of a reduce-overhead module wrapped in
  `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`.
Mechanism: the non-reentrant checkpoint frees and recomputes the saved activations around the
  compiled region, so the tree manager sees an input deallocated during recording that does not
  happen at replay (F9). Thread angle: with use_reentrant=True the recomputation runs on
  the autograd worker thread, which then needs the C TLS stash (F1) -- not tested upstream.
Trigger: a worker thread (seeded local + C stash so F1 is out of the way) trains a block whose
  compiled (reduce-overhead) MLP runs inside checkpoint(use_reentrant=False), --steps steps.
Affected versions: 2.8 (#154306 comment), 2.11 (bghira/SimpleTuner PR #3155).
Fix: none in harness.runtime.fixes; --reentrant (use_reentrant=True, per #154306) or no cudagraphs
  (SimpleTuner switches to mode="default" when checkpointing).
Upstream: #154306, #148829, #131062, #135298, bghira/SimpleTuner PR #3155.
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


SIGNATURE = "graph recording observed an input tensor deallocate"


def seed_tls():
    """Python local + C stash (as cstash-tls-init does), so F1 does not mask the race."""
    import collections

    import torch
    import torch._inductor.cudagraph_trees as cgt

    if not hasattr(cgt.local, "tree_manager_containers"):
        cgt.local.tree_manager_containers = {}
        cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)
    for key in ("tree_manager_containers", "tree_manager_locks"):
        if not torch._C._is_key_in_tls(key):
            torch._C._stash_obj_in_tls(key, getattr(cgt.local, key))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reentrant", action="store_true", help="use_reentrant=True (the known fix)")
    args, fs = setup(p)
    import torch
    import torch.utils.checkpoint as ckpt

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401

    hits = []

    def worker():
        fs.thread_start("train")
        seed_tls()
        mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
        cmlp = torch.compile(mlp, mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda", requires_grad=True)
        for _ in range(args.steps):
            mlp.zero_grad(set_to_none=True)
            try:
                with fs.around_call():
                    y = ckpt.checkpoint(cmlp, x * 1.0, use_reentrant=args.reentrant)
                    y.square().mean().backward()
            except RuntimeError as exc:
                if SIGNATURE not in str(exc):
                    raise
                hits.append((threading.current_thread().name, exc))
                return
            beat()
        torch.cuda.synchronize()

    errors = run_threads({"repro-train": worker}, deadline_s=480)
    if hits:
        name, first = hits[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"REPRODUCED: RuntimeError: {str(first).splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED ({args.steps} checkpointed steps, use_reentrant={args.reentrant})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
