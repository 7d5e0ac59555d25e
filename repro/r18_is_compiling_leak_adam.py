"""r18_is_compiling_leak_adam: another thread's compile changes eager Adam's numbers.

Symptom: no error; eager `torch.optim.Adam(foreach=False)` steps in one thread are not bitwise
  equal to the same steps computed before (max abs diff up to ~4e-7) while another thread is
  compiling: a silent, tiny, non-deterministic change in training numerics.
Mechanism: `torch.compiler._is_compiling_flag` is a process global that Dynamo sets for the
  whole compile session (convert_frame `_compile_session_context`); the single-tensor Adam path
  calls `_get_value(step_t)`, which returns the float32 step tensor instead of a Python float when
  `is_compiling()` is True, so the bias corrections are computed in float32 (cpu-experiments R8;
  single-thread control: forcing the flag gives exactly the same 4.02e-07).
Trigger: thread `repro-compiler` compiles --k fresh functions (backend --backend) while thread
  `repro-optimizer` repeats --steps eager Adam steps and compares bitwise with a reference made
  before the compiler started. cpu-experiments: 20/20 runs, ~98 % of iterations.
Affected versions: 2.13.0 CPU (observed); any version whose _get_value reads is_compiling().
Fix: global-lock (the optimizer steps and the compiles under one lock).
Upstream: none found for this leak; related: PR #196637 (process-global eval-frame flags), #118390.
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


def adam_run(torch, steps):
    """--steps eager Adam steps on a fixed problem; returns the final parameters."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, generator=g).requires_grad_()
    target = torch.randn(64, generator=g)
    opt = torch.optim.Adam([w], lr=1e-2, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        ((w - target) ** 2).sum().backward()
        opt.step()
    return w.detach().clone()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=4, help="fresh functions compiled by the other thread")
    p.add_argument("--steps", type=int, default=5, help="Adam steps per comparison")
    p.add_argument("--backend", default="aot_eager", choices=("eager", "aot_eager", "inductor"))
    args, fs = setup(p)
    import torch

    reference = adam_run(torch, args.steps)  # single-threaded, before any compile
    stop, diffs, counts = threading.Event(), [], {"runs": 0}

    def optimizer():
        fs.thread_start("optimizer")
        while not stop.is_set():
            with fs.around_call():
                w = adam_run(torch, args.steps)
            counts["runs"] += 1
            if not torch.equal(w, reference):
                diffs.append((w - reference).abs().max().item())
            beat()

    def compiler():
        fs.thread_start("compiler")
        try:
            for i in range(args.k):
                ns = {}  # a fresh code object per function: each one really compiles
                exec(f"def f{i}(x):\n    return torch.cos(x) * {i + 1} + x.sum()", {"torch": torch}, ns)
                with fs.around_call():
                    torch.compile(ns[f"f{i}"], backend=args.backend)(torch.randn(4, 8))
        finally:
            stop.set()

    errors = run_threads({"repro-optimizer": optimizer, "repro-compiler": compiler}, deadline_s=180)
    if errors:
        return 1
    if diffs:
        print(f"WRONG_RESULT: eager Adam not bitwise equal to its reference in {len(diffs)}/{counts['runs']} "
              f"runs while another thread compiled (max abs diff {max(diffs):.3g})")
        return 1
    print(f"NOT REPRODUCED (bitwise equal in {counts['runs']}/{counts['runs']} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
