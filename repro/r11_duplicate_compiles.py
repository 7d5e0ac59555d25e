"""r11_duplicate_compiles: threads that miss the cache together each compile the same function.

Symptom: N threads making their first call of ONE shared `torch.compile(f)` at the same moment
  run the backend N times (N cache entries for identical graphs); no error, wasted compile time
  and recompile-limit budget. Under concurrency Dynamo may also log `Unexpected recompilation:
  runtime guards failed even though they passed during recompilation-reason analysis`.
Mechanism: the C++ eval-frame hook looks up the cache and evaluates guards BEFORE the Python
  callback takes `compile_lock`, and nothing re-checks the cache once the lock is held
  (reference F10, cpu-experiments R7 / exp 1 "duplicate compilation", exp 4).
Trigger: --threads threads wait on a Barrier, then call the shared compiled function once.
  cpu-experiments: deterministic, N threads -> N compiles for N <= 8.
Affected versions: 2.11 (H200 probe: `unique_graphs 2` for two threads), 2.13.0 CPU.
Fix: sequential-startup (first call of each thread behind a start-up lock) or global-lock.
Upstream: Dynamo devlog "Isolate Recompiles" (2026-05-04), PR #195355 (ExtraState lock), #118260.
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
        print(f"WRONG_RESULT: duplicate compiles: {args.threads} threads compiled one shared function "
              f"{len(compiles)} times (expected 1)")
        return 1
    print(f"NOT REPRODUCED (compiles: {len(compiles)} for {args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
