"""r04_shared_graph_two_threads: two threads share one cudagraphed Dynamo graph -> capture errors.

Symptom: concurrent reduce-overhead training steps fail with CUDA capture errors:
  `operation not permitted when stream is capturing`, `operation failed due to a previous error
  during capture` or `dependency created on uncaptured work in another stream`.
Mechanism: two instances of one module class share one Dynamo graph (guards do not pin the
  instance); the recorded callable in `fn_cache` is bound to the first thread's tree manager, the
  other thread's parameters have other addresses, so that manager re-records while the first
  thread launches work: two threads inside one manager and one private pool (reference F1c).
Trigger: --threads threads, each seeded (Python local + C stash, so F1 is out of the way), each
  with its own instance of one class on the same GPU, train --steps steps concurrently.
  H200 probe on 2.11: `unique_graphs 1`, capture errors; sequential warm-up of 4 steps did not
  help (60/60 and 56/60 steps failed).
Affected versions: 2.11 (probe); PR #184357 keeps cudagraphified callables per host thread.
Fix: expected graph-isolation (separate Dynamo graphs) or global-lock, but on the H200 (2.11)
  neither held, alone or together (see repro/README.md): avoid cudagraphs in threads that share
  a device, or one thread per device. Candidates, not yet run: cudagraph-lock alone and with
  graph-isolation (the narrow lock: cudagraph trees' record/replay only).
Upstream: #123177, PR #184357, PR #184432; NVIDIA "Graph object thread safety".
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


# Concurrent-capture failures seen on 2.11 (reference F1c/F1d and the H200 runs of this script).
CAPTURE = (
    "stream is capturing", "during capture", "uncaptured work", "Offset increment outside graph capture",
    "already recording to mempool", "cudaStreamCaptureStatusActive",
)


def seed_tls():
    """Python local + C stash (reference 2.4 fix 2), so F1 does not mask the race."""
    import collections

    import torch
    import torch._inductor.cudagraph_trees as cgt

    if not hasattr(cgt.local, "tree_manager_containers"):
        cgt.local.tree_manager_containers = {}
        cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)
    for key in ("tree_manager_containers", "tree_manager_locks"):
        if not torch._C._is_key_in_tls(key):
            torch._C._stash_obj_in_tls(key, getattr(cgt.local, key))


def train_threads(args, fs, make_model):
    """Each thread trains its own model for --steps steps; returns {thread: capture error}."""
    import torch

    barrier, hits = threading.Barrier(args.threads), {}

    def worker():
        fs.thread_start("train")
        seed_tls()
        model = make_model()
        step = torch.compile(fs.isolate(model.forward), mode="reduce-overhead")
        x = torch.randn(16, 64, device="cuda")
        barrier.wait(timeout=120)
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            try:
                with fs.around_call():
                    step(x).square().mean().backward()
            except RuntimeError as exc:
                if not any(s in str(exc) for s in CAPTURE):
                    raise
                hits[threading.current_thread().name] = exc
                return
            beat()
        torch.cuda.synchronize()

    errors = run_threads({f"repro-train-{i}": worker for i in range(args.threads)}, deadline_s=480)
    return hits, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401

    def make_model():
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()

    hits, errors = train_threads(args, fs, make_model)
    if hits:
        name, exc = next(iter(hits.items()))
        traceback.print_exception(exc)
        print(f"threads with capture errors: {len(hits)}/{args.threads}")
        print(f"REPRODUCED: RuntimeError: {str(exc).splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (capture errors in 0/{args.threads} threads, {args.steps} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
