"""r13_config_thread_local: Dynamo config set in the main thread is not seen by worker threads.

Symptom: a worker thread reads `torch._dynamo.config.error_on_nested_fx_trace == True` although the
  main thread set it to False at start-up; every "set the config once" workaround (nested-FX
  fallback, recompile limits, cudagraph switches) is silently ineffective in workers. No error.
Mechanism: torch 2.13 keeps config user overrides in a `contextvars.ContextVar`
  (torch/utils/_config_module.py: "User overrides are thread-local"); a new threading.Thread starts
  with an empty context and sees the defaults (reference F14, cpu-experiments R9 / exp 3c).
Trigger: main assigns the flag, then a fresh thread reads it. Deterministic.
Affected versions: torch 2.13 (ContextVar overrides, PR #170468 "thread-local config layer" era);
  on 2.11 the config is one global object, so this does NOT reproduce there (the other side is F4).
Fix: nested-fx-fallback (sets the flag inside each worker in FixSet.thread_start).
Upstream: #118387 (thread-local patch proposal), PR #170468, #111150, #118390.
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
        print(f"WRONG_RESULT: main set error_on_nested_fx_trace=False but {len(stale)}/{len(seen)} "
              "worker threads see True (config overrides are thread-local, F14)")
        return 1
    print(f"NOT REPRODUCED (workers seeing main's config: {len(seen)}/{len(seen)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
