"""r04_shared_graph_two_threads: two threads share one cudagraphed Dynamo graph -> capture errors.

Symptom: concurrent reduce-overhead training steps fail with CUDA capture errors:
  `operation not permitted when stream is capturing`, `operation failed due to a previous error
  during capture` or `dependency created on uncaptured work in another stream`.
Mechanism: two instances of one module class share one Dynamo graph (guards do not pin the
  instance); the recorded callable in `fn_cache` is bound to the first thread's tree manager, the
  other thread's parameters have other addresses, so that manager re-records while the first
  thread launches work: two threads inside one manager and one private pool (F1c).
Trigger: --threads threads, each seeded (Python local + C stash, so F1 is out of the way), each
  with its own instance of one class on the same GPU, train --steps steps concurrently.
  H200 probe on 2.11: `unique_graphs 1`, capture errors; sequential warm-up of 4 steps did not
  help (60/60 and 56/60 steps failed).
Affected versions: 2.11 (probe); PR #184357 keeps cudagraphified callables per host thread.
Fix: expected graph-isolation (separate Dynamo graphs) or global-lock, but on the H200 (2.11)
  neither held, alone or together (see repro/README.md): avoid cudagraphs in threads that share
  a device, or one thread per device. Candidates, not yet run: cudagraph-lock alone and with
  graph-isolation (the narrow lock: cudagraph trees' record/replay only).
Upstream: #123177, PR #184357, PR #184432; NVIDIA "Graph object thread safety".
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


# Concurrent-capture failures seen on 2.11: F1c/F1d's messages as this script's H200 runs printed them.
CAPTURE = (
    "stream is capturing",
    "during capture",
    "uncaptured work",
    "Offset increment outside graph capture",
    "already recording to mempool",
    "cudaStreamCaptureStatusActive",
)


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


def train_threads(args, fs, make_model):
    """Each thread trains its own model for --steps steps; returns {thread: capture error}."""
    import torch

    barrier, hits = threading.Barrier(args.threads), {}

    def worker():
        fs.thread_start("train")
        seed_tls()
        model = make_model()
        step = torch.compile(fs.isolate(model.forward), mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        barrier.wait(timeout=120)
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            try:
                with fs.around_call():
                    step(x).square().mean().backward()
            except RuntimeError as exc:
                if not any(s in str(exc) for s in CAPTURE):
                    raise
                hits[threading.current_thread().name] = exc
                return
            beat()
        torch.cuda.synchronize()

    errors = run_threads({f"repro-train-{i}": worker for i in range(args.threads)}, deadline_s=480)
    return hits, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401

    def make_model():
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()

    hits, errors = train_threads(args, fs, make_model)
    if hits:
        name, exc = next(iter(hits.items()))
        traceback.print_exception(exc)
        print(f"threads with capture errors: {len(hits)}/{args.threads}")
        print(f"REPRODUCED: RuntimeError: {str(exc).splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (capture errors in 0/{args.threads} threads, {args.steps} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
