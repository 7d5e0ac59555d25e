"""r14_fx_flag_stuck: FX's global tracing flag stays True after every trace has ended.

Symptom: after both threads finish, `torch.fx._symbolic_trace._is_fx_tracing_flag` is still
  True, and every later compiled call in any thread of the process raises `RuntimeError: Detected
  that you are using FX to symbolically trace a dynamo-optimized function. This is not supported
  at the moment.` -- including a brand-new `torch.compile(..., backend="eager")` in the main thread.
Mechanism: `Tracer.trace` does `old = flag; flag = True; ... finally: flag = old` on a module
  global; a compile's make_fx and a user `symbolic_trace` in another thread interleave, so the
  last restore writes the other thread's True back (reference F2/F3, cpu-experiments R2).
Trigger: thread `repro-compiler` compiles --k fresh functions with --backend (aot_eager runs
  make_fx; eager does not, and did not reproduce: 0/10) while `repro-tracer` loops
  `torch.fx.symbolic_trace`. cpu-experiments (inductor): default 1/10, sw 5/10.
Affected versions: 2.11 and 2.13.0 CPU (global flag); PR #168999 makes the flag thread-local.
Fix: global-lock (every trace and compiled call under one lock: the save/restore pairs nest).
Upstream: PR #168999, PR #187589, #126024; PyTorch's TestMakeFx tearDown resets the flag by hand.
"""

# --- shared repro preamble: identical in every repro/rNN_*.py (tests/test_repro_scripts.py) ---
import argparse
import contextlib
import faulthandler
import os
import sys
import threading
import time
import traceback

_HB = {"n": 0, "t": 0.0, "lock": threading.Lock()}


def beat():
    """Rewrite $HARNESS_HEARTBEAT ("<n> <unix time>") at most every 0.2 s: progress, not a hang."""
    path = os.environ.get("HARNESS_HEARTBEAT")
    with _HB["lock"]:
        _HB["n"] += 1
        if path and time.monotonic() - _HB["t"] >= 0.2:
            _HB["t"] = time.monotonic()
            with open(path + ".tmp", "w") as f:
                f.write(f"{_HB['n']} {time.time()}\n")
            os.replace(path + ".tmp", path)


class NoFixes:
    """Stands in for dflash.fixes.FixSet when no --fix is given (dflash is not imported then)."""

    def thread_start(self, role):
        pass

    def around_call(self):
        return contextlib.nullcontext()

    def active(self, name):
        return False

    def isolate(self, fn):
        return fn


def setup(p):
    """Parse args; faulthandler, switch interval, FixSet for --fix (bad name: one line, exit 2)."""
    p.add_argument("--fix", action="append", default=[], help="fix name from dflash.fixes (repeatable)")
    p.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval value")
    args = p.parse_args()
    faulthandler.enable()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if not args.fix:
        return args, NoFixes()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from dflash.fixes import FixSet

    try:
        return args, FixSet.from_names(args.fix)
    except ValueError as exc:  # dflash.errors.ConfigError
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def run_threads(bodies, deadline_s):
    """Run {name: fn} in named threads joined by one deadline; print and return their errors."""
    errors = {}

    def wrap(name, fn):
        try:
            fn()
        except BaseException as exc:
            errors[name] = exc

    threads = [threading.Thread(target=wrap, args=item, name=item[0]) for item in bodies.items()]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(timeout=max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        print(f"HANG: threads still alive after {deadline_s} s", file=sys.stderr)
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)
    for name, exc in errors.items():
        print(f"=== thread {name} failed: {type(exc).__name__}: {exc} ===", file=sys.stderr)
        traceback.print_exception(exc)
    return errors
# --- end of shared repro preamble ---


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=3, help="fresh functions compiled while tracing")
    p.add_argument("--backend", default="aot_eager", choices=("aot_eager", "inductor", "eager"))
    p.add_argument("--calls", type=int, default=300, help="calls per compiled function (reference: 300)")
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
    if st._is_fx_tracing_flag:
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


if __name__ == "__main__":
    sys.exit(main())
