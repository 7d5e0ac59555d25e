"""r14_fx_flag_stuck: FX's global tracing flag stays True after every trace has ended.

Symptom: after both threads finish, `torch.fx._symbolic_trace._is_fx_tracing_flag` is still
  True, and every later compiled call in any thread of the process raises `RuntimeError: Detected
  that you are using FX to symbolically trace a dynamo-optimized function. This is not supported
  at the moment.` -- including a brand-new `torch.compile(..., backend="eager")` in the main thread.
Mechanism: `Tracer.trace` does `old = flag; flag = True; ... finally: flag = old` on a module
  global; a compile's make_fx and a user `symbolic_trace` in another thread interleave, so the
  last restore writes the other thread's True back (F2's stuck face, R2; F3 races the same way).
Trigger: thread `repro-compiler` compiles --k fresh functions with --backend (aot_eager runs
  make_fx; eager does not, and did not reproduce: 0/10) while `repro-tracer` loops
  `torch.fx.symbolic_trace`. First measured on 2.13 CPU (inductor): 1/10, 5/10 at a 1e-6 switch.
Affected versions: 2.11 and 2.13.0 CPU (global flag); PR #168999 makes the flag thread-local
  (in 2.14.1: 0 failures, the flag is `_is_fx_tracing_tls`).
Fix: global-lock (every trace and compiled call under one lock: the save/restore pairs nest).
Upstream: PR #168999, PR #187589, #126024; PyTorch's TestMakeFx tearDown resets the flag by hand.
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=3, help="fresh functions compiled while tracing")
    p.add_argument("--backend", default="aot_eager", choices=("aot_eager", "inductor", "eager"))
    p.add_argument("--calls", type=int, default=300, help="calls per compiled function")
    args, fs = setup(p)
    import torch
    import torch.fx._symbolic_trace as st
    import torch.nn as nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x).relu()

    stop, other = threading.Event(), {}

    def attempt(fn, *a):
        try:
            with fs.around_call():
                fn(*a)
        except Exception as exc:  # other races of the family (R1, R3, R4): counted, not ours
            key = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            other[key] = other.get(key, 0) + 1
        beat()

    def tracer():
        fs.thread_start("tracer")
        m = Small()
        while not stop.is_set():
            attempt(torch.fx.symbolic_trace, m)

    def compiler():
        fs.thread_start("compiler")
        try:
            for i in range(args.k):
                ns = {}  # a fresh code object per function: each one really compiles
                exec(f"def f{i}(x):\n    return torch.cos(x) * {i + 1} + x.sum()", {"torch": torch}, ns)
                fn = torch.compile(ns[f"f{i}"], backend=args.backend)
                for _ in range(args.calls):
                    attempt(fn, torch.randn(4, 8))
        finally:
            stop.set()

    errors = run_threads({"repro-compiler": compiler, "repro-tracer": tracer}, deadline_s=180)
    if flag_stuck(st):
        try:
            torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
            print("WRONG_RESULT: _is_fx_tracing_flag stuck True after all traces ended")
        except RuntimeError as exc:
            traceback.print_exception(exc)
            print(f"REPRODUCED: _is_fx_tracing_flag stuck True; a fresh compiled call raises RuntimeError: {exc}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (flag False after the run; other errors: {other or 'none'})")
    return 0


def flag_stuck(st) -> bool:
    """The flag as every thread sees it. Since PR #168999 (torch 2.14) it is thread-local
    (`_is_fx_tracing_tls`): no module global is left to get stuck, and this thread's own is read."""
    if hasattr(st, "_is_fx_tracing_flag"):
        return st._is_fx_tracing_flag
    return st._get_is_fx_tracing()


if __name__ == "__main__":
    sys.exit(main())
