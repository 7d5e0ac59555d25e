"""r13_config_thread_local: Dynamo config set in the main thread is not seen by worker threads.

Symptom: a worker thread reads `torch._dynamo.config.error_on_nested_fx_trace == True` although the
  main thread set it to False at start-up; every "set the config once" workaround (nested-FX
  fallback, recompile limits, cudagraph switches) is silently ineffective in workers. No error.
Mechanism: torch 2.13 keeps config user overrides in a `contextvars.ContextVar`
  (torch/utils/_config_module.py: "User overrides are thread-local"); a new threading.Thread starts
  with an empty context and sees the defaults (F14, its R9 face).
Trigger: main assigns the flag, then a fresh thread reads it. Deterministic.
Affected versions: torch 2.13 (ContextVar overrides, PR #170468 "thread-local config layer" era);
  on 2.11 the config is one global object, so this does NOT reproduce there (the other side is F4).
Fix: nested-fx-fallback (sets the flag inside each worker in FixSet.thread_start).
Upstream: #118387 (thread-local patch proposal), PR #170468, #111150, #118390.
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="worker threads that read the config")
    args, fs = setup(p)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    import torch._dynamo

    torch._dynamo.config.error_on_nested_fx_trace = False  # the usual "set once at start-up"
    fs.thread_start("main")
    seen = {}

    def worker():
        fs.thread_start("worker")
        seen[threading.current_thread().name] = torch._dynamo.config.error_on_nested_fx_trace
        beat()

    errors = run_threads({f"repro-worker-{i}": worker for i in range(args.threads)}, deadline_s=60)
    if errors:
        return 1
    stale = [name for name, value in seen.items() if value is not False]
    if stale:
        print(
            f"WRONG_RESULT: main set error_on_nested_fx_trace=False but {len(stale)}/{len(seen)} "
            "worker threads see True (config overrides are thread-local, F14)"
        )
        return 1
    print(f"NOT REPRODUCED (workers seeing main's config: {len(seen)}/{len(seen)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
