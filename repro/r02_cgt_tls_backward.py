"""r02_cgt_tls_backward: cudagraph TLS seeded in Python only -> backward asserts on autograd thread.

Symptom: the forward of a reduce-overhead training step works in a worker thread, then
  `loss.backward()` raises `AssertionError` (empty message) at `assert
  torch._C._is_key_in_tls(attr_name)` in cudagraph_trees `get_obj`, called on the autograd
  device thread (`Dummy-1`), not on the worker.
Mechanism: the widespread workaround seeds `cudagraph_trees.local.tree_manager_containers/locks`
  in the worker (fixes the forward), but backward runs on the autograd engine's device thread,
  which resolves the tree manager through the C++ TLS stash copied from the caller -- empty here
  (reference F1 via backward, section 2.3 step 5).
Trigger: main imports cudagraph_trees; a worker seeds the Python local only (default; --no-seed
  drops it, then the forward asserts as in r01) and trains nn.Linear with mode="reduce-overhead"
  for --steps steps. H200 probe on 2.11 ("train" B): forward ok, backward asserted on Dummy-1.
Affected versions: 2.11 (probe) and every version without PR #184357.
Fix: cstash-tls-init (also stashes in C TLS) or single-thread-autograd (backward on the caller).
Upstream: #123177, #126934, PR #136735, PR #184357, PR #192004.
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


def need_cuda(torch):
    if not torch.cuda.is_available():
        print("SKIP: needs CUDA")
        sys.exit(0)


def tls_assert(exc):
    """True for the F1 signature: AssertionError raised in cudagraph_trees.get_obj."""
    tb = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, AssertionError) and any(
        fr.name == "get_obj" and fr.filename.endswith("cudagraph_trees.py") for fr in tb
    )


def seed_python_local():
    """The common partial workaround (reference 2.4 fix 1): Python TLS only, no C stash."""
    import collections

    import torch._inductor.cudagraph_trees as cgt

    if not hasattr(cgt.local, "tree_manager_containers"):
        cgt.local.tree_manager_containers = {}
        cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="training steps in the worker")
    p.add_argument("--no-seed", action="store_true", help="skip the Python-local seeding")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401  the main thread becomes the importer

    def worker():
        fs.thread_start("train")
        if not args.no_seed:
            seed_python_local()
        model = torch.nn.Linear(64, 64, device="cuda")
        step = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)  # cudagraph outputs must not feed .grad accumulation
            with fs.around_call():
                step(x).square().mean().backward()
            beat()
        torch.cuda.synchronize()

    errors = run_threads({"repro-train": worker}, deadline_s=480)
    if any(tls_assert(exc) for exc in errors.values()):
        print("REPRODUCED: AssertionError: (empty) at cudagraph_trees.get_obj: "
              "assert torch._C._is_key_in_tls(attr_name)")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED ({len(errors)} failed threads; {args.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
