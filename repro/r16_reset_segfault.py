"""r16_reset_segfault: torch._dynamo.reset() in one thread crashes a compiled call in another.

Symptom: the process dies with SIGSEGV (sometimes SIGFPE): `Fatal Python error: Segmentation
  fault`, the crashing thread in `torch/_dynamo/eval_frame.py compile_wrapper` (C++ eval frame /
  cache lookup), the other in `torch/_dynamo/__init__.py reset` (`with convert_frame.compile_lock`).
  Rarer, non-fatal: `NameError: name '__compiled_fn_...' is not defined` (R6).
  Native stack (harness.trial.native, results/native-cpu, torch 2.13 CPU): 21 of 21 SIGSEGV and 2 of 2
  SIGFPE crashes under reset() end in `create_cache_entry` (the unordered_map insertion of the new
  cache entry into the code's ExtraState), not in the lookup.
Mechanism: reset() holds compile_lock and clears every code object's cache entries, but another
  thread's cache-entry insertion after a compile, its cache lookup / guard evaluation and the
  transformed bytecode run outside that lock (R5, and R6 for the NameError).
Trigger: thread `repro-caller` calls one compiled function (backend --backend) for --secs;
  thread `repro-resetter` loops `torch._dynamo.reset(); sleep(1 ms)`. First measured on 2.13 CPU:
  eager 1/20 (NameError 2/10), 10/10 at a 1e-6 switch; aot_eager 5/5 and inductor 3/5 at that switch.
Affected versions: 2.13.0 CPU (observed); 2.11 takes the same lock only in reset (not verified).
Fix: global-lock (reset and every compiled call under one lock). Best fix: never reset while
  other threads run compiled code.
Upstream: PR #195355 (ExtraState lock; notes reset inside guard evaluation), PR #196637.
"""

import argparse
import sys
import threading
import time
import traceback

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--secs", type=float, default=5.0, help="how long the caller runs")
    p.add_argument("--backend", default="eager", choices=("eager", "aot_eager", "inductor"))
    p.add_argument("--what", default="reset", choices=("reset", "reset_code_caches"))
    args, fs = setup(p)
    import torch
    import torch._dynamo

    def f(x, w):
        return torch.relu(x @ w).sin() + 1.0

    cf = torch.compile(f, backend=args.backend)
    reset = getattr(torch._dynamo, args.what)
    stop, failures, counts = threading.Event(), [], {"calls": 0, "resets": 0}

    def resetter():
        fs.thread_start("resetter")
        while not stop.is_set():
            with fs.around_call():
                reset()
            counts["resets"] += 1
            time.sleep(0.001)

    def caller():
        fs.thread_start("caller")
        w, end = torch.randn(8, 8), time.monotonic() + args.secs
        try:
            while time.monotonic() < end:
                x = torch.randn(4, 8)
                try:
                    with fs.around_call():
                        out = cf(x, w)
                except NameError as exc:  # R6: the transformed bytecode lost its __compiled_fn
                    failures.append((threading.current_thread().name, exc))
                    break
                # atol 1e-6, not allclose's 1e-8: outputs near 0 (sin = -1) differ by one float32
                # ulp (1.2e-7) between Inductor and eager with no race at all (214 of 3000
                # single-thread calls, torch 2.13 CPU: results/native-cpu/inductor-vs-eager.txt);
                # a corrupted result is far off.
                if not torch.allclose(out, f(x, w), atol=1e-6):
                    raise AssertionError("compiled result differs from eager")
                counts["calls"] += 1
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-resetter": resetter, "repro-caller": caller}, deadline_s=args.secs + 120)
    if failures:
        name, first = failures[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"REPRODUCED: NameError: {first}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (no crash; calls {counts['calls']}, {args.what} {counts['resets']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
