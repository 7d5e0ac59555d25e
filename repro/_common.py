"""Helpers every repro/rNN_*.py script shares: argument setup, the thread runner, the heartbeat.

The output protocol they implement is repro/README.md's "Contract". Stdlib only, so that a script
still runs with torch alone: `harness.runtime.fixes` (the installed project, or the checkout on
PYTHONPATH) is imported only when `--fix` is given. Running
`python repro/rNN_slug.py` puts repro/ first on sys.path, so the scripts' `from _common import ...`
finds this file without repro/ being a package.
"""

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
    """Stands in for harness.runtime.fixes.FixSet when no --fix is given (dflash is not imported then)."""

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
    p.add_argument("--fix", action="append", default=[], help="fix name from harness.runtime.fixes (repeatable)")
    p.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval value")
    args = p.parse_args()
    faulthandler.enable()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if not args.fix:
        return args, NoFixes()
    # The registry comes from the installed project (`pip install -e .`), or from the checkout
    # that harness trials put on PYTHONPATH.
    try:
        from harness.runtime.fixes import FixSet
    except ImportError:
        print(
            "error: --fix needs the project importable: `pip install -e .` in the checkout, or PYTHONPATH=<checkout>",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        fs = FixSet.from_names(args.fix)
    except ValueError as exc:  # harness.runtime.errors.ConfigError
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    fs.process_start()  # the main thread, before any worker starts
    return args, fs


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
