"""r07_current_patcher: FX's global CURRENT_PATCHER is clobbered by two concurrent traces.

Symptom: `AssertionError: CURRENT_PATCHER is None in finally block` (torch/fx/_symbolic_trace.py
  `_new_patcher`), raised in a user `symbolic_trace` or inside a compile, where it surfaces as
  `InductorError` / `BackendCompilerFailed: ... AssertionError: CURRENT_PATCHER is None in finally
  block`; or `CURRENT_PATCHER was changed during a revert_all_patches`; or silent graph corruption.
Mechanism: `_new_patcher()` saves the module-global CURRENT_PATCHER, installs its own and
  restores the saved one in `finally`; two threads' save/restore pairs interleave, so one of them
  finds None (F3, its R3 face).
Trigger: --mode compile (default: a compile beside a user trace): thread `repro-compiler` compiles
  --k fresh functions with backend=aot_eager (make_fx -> Tracer.trace) while thread `repro-tracer`
  loops `torch.fx.symbolic_trace`; first measured on 2.13 CPU: inductor 1/10, 4/10 at a 1e-6 switch.
  --mode trace: two threads both loop `symbolic_trace` (the same global, no compile).
Affected versions: 2.13 nightly (#168042 "Error #1"), 2.13.0 CPU (R3); all versions with the
  global patcher.
Fix: global-lock (every trace and compiled call under one lock, i.e. serialize all FX tracing).
Upstream: #168042, PR #187589 (thread-local patcher), PR #189884.
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup

SIGNATURE = "CURRENT_PATCHER"


def chain(exc):
    """Messages of exc and its causes, outermost first (a compile wraps the assertion)."""
    out = []
    while exc is not None:
        out.append(f"{type(exc).__name__}: {exc}".strip())
        exc = exc.__cause__ or exc.__context__
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("compile", "trace"), default="compile")
    p.add_argument("--k", type=int, default=3, help="fresh functions compiled (--mode compile)")
    p.add_argument("--iters", type=int, default=300, help="traces per tracer (--mode trace)")
    p.add_argument("--calls", type=int, default=300, help="calls per compiled function")
    args, fs = setup(p)
    import torch
    import torch.nn as nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x).relu()

    stop, hits, other = threading.Event(), [], {}

    def attempt(fn, *a):
        try:
            with fs.around_call():
                fn(*a)
        except Exception as exc:  # sort: our signature vs. other races of the same family
            if any(SIGNATURE in text for text in chain(exc)):
                hits.append((threading.current_thread().name, exc))
                stop.set()  # one is enough
            else:
                key = chain(exc)[-1][:100]
                other[key] = other.get(key, 0) + 1
        beat()

    def tracer(n=None):
        fs.thread_start("tracer")
        m, done = Small(), 0
        while not stop.is_set() and (n is None or done < n):
            attempt(torch.fx.symbolic_trace, m)
            done += 1

    def compiler():
        fs.thread_start("compiler")
        try:
            for i in range(args.k):
                ns = {}  # a fresh code object per function: each one really compiles
                exec(f"def f{i}(x):\n    return torch.cos(x) * {i + 1} + x.sum()", {"torch": torch}, ns)
                fn = torch.compile(ns[f"f{i}"], backend="aot_eager")
                for _ in range(args.calls):
                    if not stop.is_set():
                        attempt(fn, torch.randn(4, 8))
        finally:
            stop.set()

    if args.mode == "compile":
        bodies = {"repro-compiler": compiler, "repro-tracer": tracer}
    else:
        bodies = {f"repro-tracer-{i}": (lambda: tracer(args.iters)) for i in range(2)}
    errors = run_threads(bodies, deadline_s=180)
    if hits:
        name, first = hits[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        inner = [text for text in chain(first) if SIGNATURE in text][-1]
        print(f"REPRODUCED: {inner.splitlines()[-1]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED ({len(hits)} patcher errors; other errors: {other or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
