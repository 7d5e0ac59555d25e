"""r05_concurrent_record_rng: concurrent cudagraph recordings with RNG on one GPU fail.

Symptom: training steps in two threads with DISTINCT graphs (and distinct tree managers) fail
  from the first recording with `operation not permitted when stream is capturing` /
  `operation failed due to a previous error during capture`; with a lock around only the first
  steps, later: `RuntimeError: Offset increment outside graph capture encountered unexpectedly.`
Mechanism: stream-capture RNG state is kept per device generator, registered unconditionally for
  the device's default generator, and only one capture may be in flight per generator; the
  allocator's capture gates are device-wide too (F1d; #172390, #137844).
Trigger: --threads threads, each seeded (local + C stash), each compiling its OWN forward code
  (distinct graphs) of a model with nn.Dropout, mode="reduce-overhead", same GPU, --steps
  concurrent steps. H200 probe on 2.11: 59/60 steps failed in both threads; no Dropout: 0/60.
Affected versions: 2.11 (probe); per-capture RNG state is in open PRs #176752 / #176754.
Fix: global-lock (every step under one lock: 0 errors in the probe). A lock around the first
  steps only (sequential warm-up) is NOT enough (1/60 failure at step 10 in the probe).
  Candidate, not yet run: cudagraph-lock (only the cudagraph trees' record/replay under a lock).
Upstream: #172390, PR #176752, PR #176754, #137844, PR #152472, PR #181830.
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


def own_code(fn, tag):
    """fn with its own code object: each thread gets its own Dynamo graph (distinct classes)."""
    import types

    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dropout", type=float, default=0.1, help="0 = control without RNG")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401

    barrier, hits = threading.Barrier(args.threads), {}

    def forward(model, x):
        return model(x)

    def worker(i):
        fs.thread_start("train")
        seed_tls()
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.Dropout(args.dropout), torch.nn.Linear(64, 64)
        ).cuda()
        step = torch.compile(own_code(forward, i), mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        barrier.wait(timeout=120)
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            try:
                with fs.around_call():
                    step(model, x).square().mean().backward()
            except RuntimeError as exc:
                if not any(s in str(exc) for s in CAPTURE):
                    raise
                hits[threading.current_thread().name] = exc
                return
            beat()
        torch.cuda.synchronize()

    bodies = {f"repro-train-{i}": (lambda i=i: worker(i)) for i in range(args.threads)}
    errors = run_threads(bodies, deadline_s=480)
    if hits:
        exc = next(iter(hits.values()))
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
