"""r17_recompile_limit_eager_fallback: past 8 threads, a shared compiled function silently runs eagerly.

Symptom: no error; --threads (> 8) threads make their first call of one shared compiled function
  together; the backend runs only 8 times and the remaining threads run the Python function
  eagerly (`torch._dynamo hit config.recompile_limit (8)`, `last reason: 0/7: Unexpected
  recompilation: runtime guards failed even though they passed during recompilation-reason
  analysis`). Later calls with new shapes stay eager too: silent loss of the compiled path.
Mechanism: every thread that missed the cache compiles again and adds a cache entry for the same
  code object (duplicate compiles, r11); after recompile_limit entries the frame is marked to
  run eagerly (reference F10, cpu-experiments R7).
Trigger: --threads threads wait on a Barrier, then call the shared compiled function once.
  cpu-experiments: 12 threads -> 8 compiles and 4 eager fallbacks, every run.
Affected versions: 2.13.0 CPU (observed); 2.11 shares the mechanism (duplicate compile seen).
Fix: sequential-startup (first call behind a start-up lock: one compile) or global-lock.
Upstream: Dynamo devlog "Isolate Recompiles" (2026-05-04, isolate_recompiles), PR #195355.
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
        print(f"WRONG_RESULT: {eager}/{args.threads} first calls ran eagerly (recompile limit hit "
              f"after {len(compiles)} compiles of one shared function)")
        return 1
    print(f"NOT REPRODUCED (compiles: {len(compiles)}, compiled runs {len(runs)}/{args.threads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
