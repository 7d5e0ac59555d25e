"""r01_cgt_tls_fresh_thread: a reduce-overhead call in a fresh thread asserts in cudagraph_trees.

Symptom: `AssertionError` with an EMPTY message at `assert torch._C._is_key_in_tls(attr_name)`
  in torch/_inductor/cudagraph_trees.py `get_obj` (2.11 line 359), raised from the first call of
  a `mode="reduce-overhead"` (or max-autotune / backend="cudagraphs") function in a new thread.
Mechanism: the tree-manager containers live on a module-level `threading.local()` populated only
  in the thread that imported cudagraph_trees, plus a C++ TLS stash that autograd propagates but
  a new `threading.Thread` does not get (reference F1, section 2.3).
Trigger: the main thread imports torch._inductor.cudagraph_trees (as any earlier compile would);
  --threads workers then make their first call of one compiled function behind a Barrier.
  #123177 repro agent (2.13 nightly, 32 threads): 8/32 failed; H200 probe on 2.11: an unseeded
  thread with a new shape asserted every time.
Affected versions: 2.9.x, 2.10, 2.11 (probe), 2.13.0.dev nightly; fixed by PR #184357 (lazy TLS).
Fix: local-tls-init or cstash-tls-init remove the assert; the threads then share one graph and
  hit F1c capture errors (H200, 2.11: cstash-tls-init 1/4 runs clean, one SIGSEGV); cstash-tls-init
  plus global-lock: 2/2 clean (repro/README.md). Candidate, not yet run: cstash-tls-init plus
  cudagraph-lock (the narrow lock: cudagraph trees' record/replay only).
Upstream: #123177, PR #184357, PR #138282 (closed), PR #184432.
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=4, help="fresh threads making the first call")
    p.add_argument("--mode", default="reduce-overhead", help="torch.compile mode using cudagraphs")
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401  the main thread becomes the importer

    def foo(x, y):
        return torch.sin(x) + torch.cos(y)

    compiled = torch.compile(foo, mode=args.mode)
    barrier = threading.Barrier(args.threads)

    def worker():
        fs.thread_start("worker")
        x, y = torch.rand(2, 3, device="cuda"), torch.rand(2, 3, device="cuda")
        barrier.wait(timeout=120)
        with torch.no_grad(), fs.around_call():
            for _ in range(3):  # warm-up, record, replay
                # Clone at once: a cudagraph output lives in a static buffer that every caller of
                # this graph overwrites (all threads share the one graph here).
                out = compiled(x, y).clone()
        torch.cuda.synchronize()
        if not torch.allclose(out, foo(x, y)):
            raise AssertionError("compiled result differs from eager")
        beat()

    errors = run_threads({f"repro-worker-{i}": worker for i in range(args.threads)}, deadline_s=480)
    hits = [exc for exc in errors.values() if tls_assert(exc)]
    if hits:
        print(f"failed threads: {len(hits)}/{args.threads}")
        print("REPRODUCED: AssertionError: (empty) at cudagraph_trees.get_obj: "
              "assert torch._C._is_key_in_tls(attr_name)")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (failed threads: {len(errors)}/{args.threads}, none at get_obj)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
