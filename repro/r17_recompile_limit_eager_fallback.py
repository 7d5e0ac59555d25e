"""r17_recompile_limit_eager_fallback: past 8 threads, a shared compiled function silently runs eagerly.

Symptom: no error; --threads (> 8) threads make their first call of one shared compiled function
  together; the backend runs only 8 times and the remaining threads run the Python function
  eagerly (`torch._dynamo hit config.recompile_limit (8)`, `last reason: 0/7: Unexpected
  recompilation: runtime guards failed even though they passed during recompilation-reason
  analysis`). Later calls with new shapes stay eager too: silent loss of the compiled path.
Mechanism: every thread that missed the cache compiles again and adds a cache entry for the same
  code object (duplicate compiles, r11); after recompile_limit entries the frame is marked to
  run eagerly (F10, its R7 face).
Trigger: --threads threads wait on a Barrier, then call the shared compiled function once.
  On 2.13 CPU: 12 threads -> 8 compiles and 4 eager fallbacks, every run.
Affected versions: 2.13.0 CPU (observed); 2.11 shares the mechanism (duplicate compile seen).
Fix: sequential-startup (first call behind a start-up lock: one compile) or global-lock.
Upstream: Dynamo devlog "Isolate Recompiles" (2026-05-04, isolate_recompiles), PR #195355.
"""

import argparse
import contextlib
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=12, help="threads making the first call together")
    args, fs = setup(p)
    if args.threads < 2:
        p.error("--threads must be >= 2")
    import torch

    compiles, runs, lock = [], [], threading.Lock()

    def counting_backend(gm, example_inputs):
        with lock:
            compiles.append(threading.current_thread().name)

        def compiled(*a):
            runs.append(threading.current_thread().name)  # list.append is atomic under the GIL
            return gm.forward(*a)

        return compiled

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

    errors = run_threads({f"repro-worker-{i}": worker for i in range(args.threads)}, deadline_s=240)
    if errors:
        return 1
    eager = args.threads - len(runs)
    if eager > 0:
        print(
            f"WRONG_RESULT: {eager}/{args.threads} first calls ran eagerly (recompile limit hit "
            f"after {len(compiles)} compiles of one shared function)"
        )
        return 1
    print(f"NOT REPRODUCED (compiles: {len(compiles)}, compiled runs {len(runs)}/{args.threads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
