"""r12_legacy_cudagraphs_ptr: legacy (non-tree) cudagraphs with two instances of one class.

Symptom: `AssertionError` at `assert dst.data_ptr() == src.data_ptr()` (2.11
  torch/_inductor/compile_fx.py line 1966, legacy cudagraphify) when a second instance of the
  same module class -- in another thread or the same one -- runs the shared compiled graph.
Mechanism: with `torch._inductor.config.triton.cudagraph_trees = False` each graph is recorded
  once with the first instance's parameter addresses as static inputs; both instances share one
  Dynamo graph (same code object), so the other instance's parameters violate the static-input
  assumption (reference F11). Legacy mode has no TLS, so it avoids F1 but not this.
Trigger: --threads threads, one instance each of one class, same GPU, reduce-overhead with
  cudagraph_trees=False set in each thread (thread-local on 2.13, global on 2.11), --steps
  forward calls. H200 probe on 2.11: `unique_graphs 2` (duplicate compile), one thread failed
  39/40 steps; one thread with two instances: assert every time.
Affected versions: 2.11 (probe).
Fix: expected graph-isolation (distinct Dynamo graphs per instance; verified on CPU), but on
  the H200 (2.11) the assert persisted with it, also with TORCHINDUCTOR_FX_GRAPH_CACHE=0: the
  state is shared below Dynamo. global-lock does not hold either. Use cudagraph trees (r04).
Upstream: #123177 (context), Dynamo devlog "Isolate Recompiles" (2026-05-04).
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


def legacy_ptr_assert(exc):
    """True for the F11 signature: AssertionError raised inside torch/_inductor/compile_fx.py."""
    tb = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, AssertionError) and any(fr.filename.endswith("compile_fx.py") for fr in tb)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    args, fs = setup(p)
    import torch
    import torch._inductor.config as inductor_config

    need_cuda(torch)
    barrier, hits, bad = threading.Barrier(args.threads), [], {}

    def worker():
        fs.thread_start("infer")
        inductor_config.triton.cudagraph_trees = False  # legacy cudagraphs (per thread on 2.13)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()
        step = torch.compile(fs.isolate(model.forward), mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        barrier.wait(timeout=120)
        with torch.no_grad():
            for i in range(args.steps):
                try:
                    with fs.around_call():
                        out = step(x).clone()
                except AssertionError as exc:
                    if not legacy_ptr_assert(exc):
                        raise
                    hits.append((threading.current_thread().name, exc))
                    continue
                if not torch.allclose(out, model(x), atol=1e-4):
                    bad[threading.current_thread().name] = i
                beat()
        torch.cuda.synchronize()

    errors = run_threads({f"repro-infer-{i}": worker for i in range(args.threads)}, deadline_s=480)
    if hits:
        name, first = hits[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed steps: {len(hits)}/{args.threads * args.steps}")
        print("REPRODUCED: AssertionError at legacy cudagraphify: assert dst.data_ptr() == src.data_ptr()")
        return 1
    if bad:
        print(f"WRONG_RESULT: compiled outputs differ from eager in threads {sorted(bad)}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (0/{args.threads * args.steps} steps failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
