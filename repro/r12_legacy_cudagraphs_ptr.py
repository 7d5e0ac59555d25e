"""r12_legacy_cudagraphs_ptr: legacy (non-tree) cudagraphs with two instances of one class.

Symptom: `AssertionError` at `assert dst.data_ptr() == src.data_ptr()` (2.11
  torch/_inductor/compile_fx.py line 1966, legacy cudagraphify) when a second instance of the
  same module class -- in another thread or the same one -- runs the shared compiled graph.
Mechanism: with `torch._inductor.config.triton.cudagraph_trees = False` each graph is recorded
  once with the first instance's parameter addresses as static inputs; both instances share one
  Dynamo graph (same code object), so the other instance's parameters violate the static-input
  assumption (F11). Legacy mode has no TLS, so it avoids F1 but not this.
Trigger: --threads threads, one instance each of one class, same GPU, reduce-overhead with
  cudagraph_trees=False set in each thread (thread-local on 2.13, global on 2.11), --steps
  forward calls. H200 probe on 2.11: `unique_graphs 2` (duplicate compile), one thread failed
  39/40 steps; one thread with two instances: assert every time.
Affected versions: 2.11 (probe).
Fix: expected graph-isolation (distinct Dynamo graphs per instance; verified on CPU), but on
  the H200 (2.11) the assert persisted with it, also with TORCHINDUCTOR_FX_GRAPH_CACHE=0: the
  state is shared below Dynamo. global-lock does not hold either. Use cudagraph trees (r04).
Upstream: #123177 (context), Dynamo devlog "Isolate Recompiles" (2026-05-04).
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


def legacy_ptr_assert(exc):
    """True for the F11 signature: AssertionError raised inside torch/_inductor/compile_fx.py."""
    tb = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, AssertionError) and any(fr.filename.endswith("compile_fx.py") for fr in tb)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    args, fs = setup(p)
    import torch
    import torch._inductor.config as inductor_config

    need_cuda(torch)
    barrier, hits, bad = threading.Barrier(args.threads), [], {}

    def worker():
        fs.thread_start("infer")
        inductor_config.triton.cudagraph_trees = False  # legacy cudagraphs (per thread on 2.13)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()
        step = torch.compile(fs.isolate(model.forward), mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        barrier.wait(timeout=120)
        with torch.no_grad():
            for i in range(args.steps):
                try:
                    with fs.around_call():
                        out = step(x).clone()
                except AssertionError as exc:
                    if not legacy_ptr_assert(exc):
                        raise
                    hits.append((threading.current_thread().name, exc))
                    continue
                if not torch.allclose(out, model(x), atol=1e-4):
                    bad[threading.current_thread().name] = i
                beat()
        torch.cuda.synchronize()

    errors = run_threads({f"repro-infer-{i}": worker for i in range(args.threads)}, deadline_s=480)
    if hits:
        name, first = hits[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed steps: {len(hits)}/{args.threads * args.steps}")
        print("REPRODUCED: AssertionError at legacy cudagraphify: assert dst.data_ptr() == src.data_ptr()")
        return 1
    if bad:
        print(f"WRONG_RESULT: compiled outputs differ from eager in threads {sorted(bad)}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (0/{args.threads * args.steps} steps failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
