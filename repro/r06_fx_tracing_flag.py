"""r06_fx_tracing_flag: a compiled call fails because another thread is inside FX tracing.

Symptom: `RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized
  function. This is not supported at the moment.` raised in a thread that merely calls an
  already compiled function (torch/_dynamo/eval_frame.py compile_wrapper).
Mechanism: `torch.fx._symbolic_trace._is_fx_tracing_flag` is a plain module global set by
  `Tracer.trace` (symbolic_trace, make_fx) for the whole trace; every compiled callable's wrapper
  checks `is_fx_symbolic_tracing()` and raises when `config.error_on_nested_fx_trace` (F2, its
  R1 face).
Trigger: thread `repro-tracer` loops `torch.fx.symbolic_trace` of a small module (optionally
  sleeping --hold-ms inside the traced forward, which holds the flag longer); thread
  `repro-caller` calls a compiled function (backend=eager, warmed up first) --iters times.
Affected versions: 2.4 CPU (#126024), 2.11 (H200 probe, 100 % with a 2 s hold), 2.13.0 CPU (R1).
Fix: nested-fx-fallback (error_on_nested_fx_trace=False in the caller thread: runs eagerly
  instead); global-lock also holds because the repro runs the trace under around_call too.
Upstream: #126024, PR #168999 (thread-local flag), PR #187589, PR #138282 comment.
"""

import argparse
import sys
import threading
import time
import traceback

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=500, help="compiled calls in the caller thread")
    p.add_argument("--hold-ms", type=float, default=0.0, help="sleep inside the traced forward")
    args, fs = setup(p)
    import torch
    import torch.nn as nn

    class Traced(nn.Module):
        def forward(self, x):
            if args.hold_ms:
                time.sleep(args.hold_ms / 1000.0)  # keeps the global flag set (F2 probe)
            return torch.relu(x) + 1

    def step(x):
        return torch.sin(x) * 2 + 1

    compiled = torch.compile(step, backend="eager")
    x = torch.randn(4, 8)
    compiled(x)  # warm up in the main thread: the race is on calls, not on compiles
    stop, failures, wrong = threading.Event(), [], []

    def tracer():
        fs.thread_start("tracer")
        while not stop.is_set():
            with fs.around_call():
                torch.fx.symbolic_trace(Traced())

    def caller():
        fs.thread_start("caller")
        try:
            for _ in range(args.iters):
                try:
                    with fs.around_call():
                        out = compiled(x)
                    if not torch.allclose(out, step(x)):
                        wrong.append(out)
                except RuntimeError as exc:
                    failures.append((threading.current_thread().name, exc))
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-tracer": tracer, "repro-caller": caller}, deadline_s=120)
    if failures:
        name, first = failures[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed compiled calls: {len(failures)}/{args.iters}")
        print(f"REPRODUCED: RuntimeError: {first}")
        return 1
    if wrong:
        print(f"WRONG_RESULT: {len(wrong)}/{args.iters} compiled calls returned a wrong value")
        return 1
    if errors:
        return 1
    print(f"NOT REPRODUCED (failed compiled calls: 0/{args.iters})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
