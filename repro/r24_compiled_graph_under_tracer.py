"""r24_compiled_graph_under_tracer: a compiled call fails while another thread traces (torch 2.14+).

Symptom: `NameError: module is not installed as a submodule` raised inside a torch.compile'd
  call (aot_eager): eval_frame.py compile_wrapper -> the compiled graph's `_lazy_forward` ->
  graph_module.py `__call__` -> _symbolic_trace.py module_call_wrapper -> call_module ->
  path_of_module, in a thread that only calls compiled functions.
Mechanism: R4's (r15): `Tracer.trace` patches `torch.nn.Module.__call__` on the
  class, process-wide, for the whole trace, so every module call in every thread goes through the
  tracing thread's `module_call_wrapper`. The compiled graph is itself an nn.Module (a
  GraphModule) called through `Module.__call__`, so it lands in the other thread's tracer, which
  does not own it. On 2.13 the compiled call checks FX's process-global tracing flag first and
  raises F2's RuntimeError instead (or, with error_on_nested_fx_trace off, runs eagerly); once PR
  #168999 made that flag thread-local (2.14), the compiled call no longer sees the other
  thread's trace and walks into its patched `__call__`. F2's guard used to mask this face of R4.
Trigger: thread `repro-tracer` loops `torch.fx.symbolic_trace(m)`; the main thread compiles
  --funcs fresh functions with backend aot_eager and calls each --calls times.
Affected versions: 2.14.1 and 2.15.0 (CPU, measured by the harness: catalogue row r24);
  2.13.0: not seen (see the row).
Fix: global-lock (every trace and every compiled call under one lock).
Upstream: PR #187589 "Isolate FX tracing patches from unrelated threads" (not in 2.15.0),
  PR #168999 (thread-local FX tracing flag), #126024.
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup

F2_TEXT = "Detected that you are using FX to symbolically trace a dynamo-optimized function"
F3_TEXT = "CURRENT_PATCHER"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--funcs", type=int, default=6, help="fresh functions compiled in the caller thread")
    p.add_argument("--calls", type=int, default=200, help="calls of each compiled function")
    args, fs = setup(p)
    import torch
    import torch.nn as nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x).relu()

    stop, failures, f2, f3 = threading.Event(), [], [], []

    def tracer():
        fs.thread_start("tracer")
        m = Small()
        while not stop.is_set():
            try:
                with fs.around_call():
                    torch.fx.symbolic_trace(m)
            except AssertionError as exc:
                # F3 (r07): this trace and the compile's own FX trace in the caller restore one
                # process-wide CURRENT_PATCHER. Counted and traced again: this script is about R4.
                if F3_TEXT not in str(exc):
                    raise
                f3.append(exc)

    def caller():
        fs.thread_start("caller")
        try:
            for i in range(args.funcs):
                ns = {}
                # A fresh code object per function: each one is a new Dynamo compile.
                exec(f"def f{i}(x):\n    return torch.cos(x) * {i + 1} + x.sum()", {"torch": torch}, ns)
                f = torch.compile(ns[f"f{i}"], backend="aot_eager")
                for _ in range(args.calls):
                    try:
                        with fs.around_call():
                            f(torch.randn(4, 8))
                    except NameError as exc:
                        failures.append((threading.current_thread().name, exc))
                    except RuntimeError as exc:
                        # F2's error (2.13) and F3's (the compile's own FX trace meeting the other
                        # thread's CURRENT_PATCHER, any version) are other races: counted, not this one.
                        if F2_TEXT in str(exc):
                            f2.append(exc)
                        elif F3_TEXT in str(exc):
                            f3.append(exc)
                        else:
                            raise
                    beat()
        finally:
            stop.set()

    errors = run_threads({"repro-tracer": tracer, "repro-caller": caller}, deadline_s=120)
    calls = args.funcs * args.calls
    if failures:
        name, first = failures[0]
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed compiled calls: {len(failures)}/{calls} (instead F2's RuntimeError: {len(f2)}, F3's: {len(f3)})")
        print(f"REPRODUCED: NameError: {first}")
        return 1
    if errors:
        return 1
    print(f"NOT REPRODUCED (failed compiled calls: 0/{calls}; instead F2's RuntimeError: {len(f2)}, F3's: {len(f3)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
