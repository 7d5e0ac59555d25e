"""r08_config_patch_lost: two threads' config patches interleave and `dynamic=False` is forgotten.

Symptom: no error; a function compiled with `torch.compile(..., dynamic=False)` gets a DYNAMIC
  graph (symbolic sizes) when two threads call it with different sizes -- the static-shape
  request is silently lost (#118260: "we eventually lose the race and forget that automatic
  dynamic is supposed to be turned off").
Mechanism: the `dynamic=` kwarg is applied by patching the Dynamo config around each call
  (automatic_dynamic_shapes=False, assume_static_by_default=True); on versions where the config
  is one global object, two threads' enter/exit pairs interleave and restore the wrong values
  (reference F4). On torch 2.13 overrides are thread-local (F14), so this should NOT reproduce.
Trigger: two threads call the shared compiled function with --sizes distinct sizes each
  (thread 0: 1..n, thread 1: n+1..2n), recompile_limit raised in each thread. H200 probe on 2.11
  (recompile_limit=200, sw 1e-6, 5 trials): trial 0 had 39 static + 1 dynamic graph.
Affected versions: filed 2024-01, 2.11 (1 of 5 trials); not expected on 2.13.
Fix: global-lock (calls, hence patch enter/exit pairs, never interleave).
Upstream: #118260, #111150, #118387, PR #170468 (thread-local config layer), PR #137821.
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


def is_dynamic(torch, gm):
    """True if any graph input has a symbolic size (the graph was compiled dynamic)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape)
        ):
            return True
    return False


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, default=20, help="distinct sizes per thread")
    p.add_argument("--dynamic", choices=("false", "true"), default="false", help="true = control")
    args, fs = setup(p)
    import torch
    import torch._dynamo

    graphs, lock = {"static": 0, "dynamic": 0}, threading.Lock()

    def backend(gm, example_inputs):
        with lock:
            graphs["dynamic" if is_dynamic(torch, gm) else "static"] += 1
        return gm.forward

    def f(x):
        return x * 2 + 1

    cf = torch.compile(f, backend=backend, dynamic=args.dynamic == "true")

    def worker(first):
        def body():
            fs.thread_start("worker")
            # Thread-local on 2.13 (F14), global on 2.11: set it where the compiles happen.
            torch._dynamo.config.recompile_limit = 4 * args.sizes + 8
            for size in range(first, first + args.sizes):
                with fs.around_call():
                    out = cf(torch.ones(size))
                if not torch.equal(out, torch.full((size,), 3.0)):
                    raise AssertionError("compiled result differs from eager")
                beat()

        return body

    errors = run_threads({"repro-worker-0": worker(1), "repro-worker-1": worker(1 + args.sizes)}, 240)
    if errors:
        return 1
    if graphs["dynamic"] and args.dynamic == "false":
        print(f"WRONG_RESULT: dynamic=False lost: {graphs['dynamic']} dynamic + {graphs['static']} static "
              f"graphs (expected {2 * args.sizes} static)")
        return 1
    print(f"NOT REPRODUCED (graphs: {graphs['static']} static, {graphs['dynamic']} dynamic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
