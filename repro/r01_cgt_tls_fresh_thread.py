"""r01_cgt_tls_fresh_thread: a reduce-overhead call in a fresh thread asserts in cudagraph_trees.

Symptom: `AssertionError` with an EMPTY message at `assert torch._C._is_key_in_tls(attr_name)`
  in torch/_inductor/cudagraph_trees.py `get_obj` (2.11 line 359), raised from the first call of
  a `mode="reduce-overhead"` (or max-autotune / backend="cudagraphs") function in a new thread.
Mechanism: the tree-manager containers live on a module-level `threading.local()` populated only
  in the thread that imported cudagraph_trees, plus a C++ TLS stash that autograd propagates but
  a new `threading.Thread` does not get (F1).
Trigger: the main thread imports torch._inductor.cudagraph_trees (as any earlier compile would);
  --threads workers then make their first call of one compiled function behind a Barrier.
  #123177 repro agent (2.13 nightly, 32 threads): 8/32 failed; H200 probe on 2.11: an unseeded
  thread with a new shape asserted every time.
Affected versions: 2.9.x, 2.10, 2.11 (probe), 2.13.0.dev nightly; fixed by PR #184357 (lazy TLS).
Fix: local-tls-init or cstash-tls-init remove the assert; the threads then share one graph and
  hit F1c capture errors (H200, 2.11: cstash-tls-init 1/4 runs clean, one SIGSEGV); cstash-tls-init
  plus global-lock: 2/2 clean (repro/README.md). Candidate, not yet run: cstash-tls-init plus
  cudagraph-lock (the narrow lock: cudagraph trees' record/replay only).
Upstream: #123177, PR #184357, PR #138282 (closed), PR #184432.
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
    p.add_argument("--threads", type=int, default=4, help="fresh threads making the first call")
    p.add_argument("--mode", default="reduce-overhead", help="torch.compile mode using cudagraphs")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401  the main thread becomes the importer

    def foo(x, y):
        return torch.sin(x) + torch.cos(y)

    compiled = torch.compile(foo, mode=args.mode)
    barrier = threading.Barrier(args.threads)

    def worker():
        fs.thread_start("worker")
        x, y = torch.rand(2, 3, device="cuda"), torch.rand(2, 3, device="cuda")
        barrier.wait(timeout=120)
        with torch.no_grad(), fs.around_call():
            for _ in range(3):  # warm-up, record, replay
                # Clone at once: a cudagraph output lives in a static buffer that every caller of
                # this graph overwrites (all threads share the one graph here).
                out = compiled(x, y).clone()
        torch.cuda.synchronize()
        if not torch.allclose(out, foo(x, y)):
            raise AssertionError("compiled result differs from eager")
        beat()

    errors = run_threads({f"repro-worker-{i}": worker for i in range(args.threads)}, deadline_s=480)
    hits = [exc for exc in errors.values() if tls_assert(exc)]
    if hits:
        print(f"failed threads: {len(hits)}/{args.threads}")
        print(
            "REPRODUCED: AssertionError: (empty) at cudagraph_trees.get_obj: assert torch._C._is_key_in_tls(attr_name)"
        )
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (failed threads: {len(errors)}/{args.threads}, none at get_obj)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
