"""r11_duplicate_compiles: threads that miss the cache together each compile the same function.

Symptom: N threads making their first call of ONE shared `torch.compile(f)` at the same moment
  run the backend N times (N cache entries for identical graphs); no error, wasted compile time
  and recompile-limit budget. Under concurrency Dynamo may also log `Unexpected recompilation:
  runtime guards failed even though they passed during recompilation-reason analysis`.
Mechanism: the C++ eval-frame hook looks up the cache and evaluates guards BEFORE the Python
  callback takes `compile_lock`, and nothing re-checks the cache once the lock is held
  (F10, its R7 face).
Trigger: --threads threads wait on a Barrier, then call the shared compiled function once.
  Deterministic on 2.13 CPU: N threads -> N compiles for N <= 8.
Affected versions: 2.11 (H200 probe: `unique_graphs 2` for two threads), 2.13.0 CPU.
Fix: sequential-startup (first call of each thread behind a start-up lock) or global-lock.
Upstream: Dynamo devlog "Isolate Recompiles" (2026-05-04), PR #195355 (ExtraState lock), #118260.
"""

import argparse
import contextlib
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=4, help="threads making the first call together")
    args, fs = setup(p)
    if args.threads < 2:
        p.error("--threads must be >= 2")
    import torch

    compiles, lock = [], threading.Lock()

    def counting_backend(gm, example_inputs):
        with lock:
            compiles.append(threading.current_thread().name)
        return gm.forward

    def f(x):
        return torch.sin(x) * 2 + x.cos()

    cf = torch.compile(f, backend=counting_backend)
    barrier = threading.Barrier(args.threads)
    startup = threading.Lock()  # used only by the sequential-startup policy
    x = torch.randn(4, 8)

    def worker():
        fs.thread_start("worker")
        barrier.wait(timeout=60)
        first_call = startup if fs.active("sequential-startup") else contextlib.nullcontext()
        with first_call, fs.around_call():
            out = cf(x)
        if not torch.allclose(out, f(x)):
            raise AssertionError("compiled result differs from eager")
        beat()

    errors = run_threads({f"repro-worker-{i}": worker for i in range(args.threads)}, deadline_s=180)
    if errors:
        return 1
    if len(compiles) > 1:
        print(
            f"WRONG_RESULT: duplicate compiles: {args.threads} threads compiled one shared function "
            f"{len(compiles)} times (expected 1)"
        )
        return 1
    print(f"NOT REPRODUCED (compiles: {len(compiles)} for {args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
