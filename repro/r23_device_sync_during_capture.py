"""r23_device_sync_during_capture: one thread's torch.cuda.synchronize() beside another's cudagraph recording fails.

Symptom: `torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing`
  raised by `torch.cuda.synchronize` in the thread that is not capturing (in the trainer:
  dflash-target at dflash.devices:synchronize, results/gpu-campaign), and possibly the recording
  thread's `operation failed due to a previous error during capture` after it.
Mechanism: a device-wide synchronize waits on every stream of the device, the capturing one
  included, which CUDA refuses whatever the capture mode (NVIDIA/TensorRT#2888). cudagraph trees
  capture in "thread_local" mode (PR #107407), which spares other threads' unsafe calls, not a
  device-wide wait. A global lock around compiled calls does not help when the synchronize sits
  outside the lock, as the trainer's target loop's does (F1d's message, a new cause).
Trigger: thread repro-capture runs a function compiled with mode="reduce-overhead",
  dynamic=True on --shapes input sizes (cudagraph trees record one graph per new size); thread
  repro-sync runs a small eager op and then synchronizes the device, in a loop, until the
  recordings are done. No RNG and no cuBLAS in the graph: F1d's RNG and G1 stay out.
Affected versions: 2.11 (the trainer's failure, 1 of 29 stressed trials); any version whose
  cudagraph trees record while another thread may synchronize (a CUDA rule, not a torch bug).
Fix: stream-sync (the synchronizing thread waits on its current stream only; a cudagraph tree
  captures on a pool stream, never that one). global-lock does not cover it (the synchronize
  is outside the lock, as in the trainer). Not yet run on a GPU.
Upstream: PR #107407 (thread_local capture in Inductor), NVIDIA/TensorRT#2888 (device sync breaks
  a capture in any mode), #172390 (one capture per device generator, F1d).
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup


def need_cuda(torch):
    if not torch.cuda.is_available():
        print("SKIP: needs CUDA")
        sys.exit(0)


# What a synchronize beside a capture raises, and what the capture then ends with (2.11).
CAPTURE = ("stream is capturing", "during capture", "cudaStreamCaptureStatusActive", "capture was invalidated")


def seed_local():
    """cudagraph trees' per-thread dicts in this (fresh) thread: F1 out of the way. Forward only, so
    the C stash (backward on the autograd thread, and r22's refcount) is not needed."""
    import collections

    import torch._inductor.cudagraph_trees as cgt

    if not hasattr(cgt.local, "tree_manager_containers"):
        cgt.local.tree_manager_containers = {}
        cgt.local.tree_manager_locks = collections.defaultdict(threading.Lock)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=int, default=40, help="input sizes: one cudagraph recording each")
    p.add_argument("--calls", type=int, default=3, help="calls per size (warm-up, record, replay)")
    p.add_argument(
        "--depth",
        type=int,
        default=6,
        help="sin/softmax rounds in the graph: more kernels, a longer capture to land in",
    )
    args, fs = setup(p)
    if args.shapes < 1 or args.calls < 1 or args.depth < 1:
        print("error: --shapes, --calls and --depth must be >= 1", file=sys.stderr)
        return 2
    import torch

    need_cuda(torch)
    import torch._inductor.cudagraph_trees  # noqa: F401

    stream_only = fs.active("stream-sync")
    done, started, hits, counts = threading.Event(), threading.Barrier(2), {}, {"syncs": 0, "recorded": 0}

    def body(x):
        for _ in range(args.depth):
            x = torch.sin(x) * x + x.softmax(-1)
        return x.sum(-1)

    def capture():
        try:
            fs.thread_start("capture")
            seed_local()
            fn = torch.compile(body, mode="reduce-overhead", dynamic=True)
            started.wait(timeout=120)
            with torch.no_grad():
                for n in range(1, args.shapes + 1):
                    x = torch.randn(8 * n, 512, device="cuda")
                    for _ in range(args.calls):
                        try:
                            with fs.around_call():
                                fn(x)
                        except RuntimeError as exc:  # torch.AcceleratorError is one
                            if not any(s in str(exc) for s in CAPTURE):
                                raise
                            hits.setdefault(threading.current_thread().name, exc)
                            return
                        beat()
                    counts["recorded"] = n
            torch.cuda.synchronize()
        finally:
            done.set()
            started.abort()  # failed before the barrier: the sync thread stops waiting now

    def sync():
        fs.thread_start("sync")
        a = torch.randn(256, 512, device="cuda")
        try:
            started.wait(timeout=120)
        except threading.BrokenBarrierError:
            if done.is_set():
                return  # the capture thread ended first: its error is the one to report
            raise
        while not done.is_set():
            with fs.around_call():  # the eager work under the fixes, the wait outside (as in the trainer)
                (a * 2).sum()
            try:
                if stream_only:
                    torch.cuda.current_stream().synchronize()
                else:
                    torch.cuda.synchronize()
            except RuntimeError as exc:
                if not any(s in str(exc) for s in CAPTURE):
                    raise
                hits.setdefault(threading.current_thread().name, exc)
                return
            counts["syncs"] += 1
            beat()

    errors = run_threads({"repro-capture": capture, "repro-sync": sync}, deadline_s=480)
    wait = "current-stream" if stream_only else "device-wide"
    if hits:
        for name, exc in hits.items():
            print(f"=== {name}: {type(exc).__name__}: {str(exc).splitlines()[0]} ===", file=sys.stderr)
            traceback.print_exception(exc)
        exc = hits.get("repro-sync") or next(iter(hits.values()))
        print(
            f"capture errors in {', '.join(sorted(hits))} after {counts['syncs']} {wait} syncs, "
            f"{counts['recorded']}/{args.shapes} sizes recorded"
        )
        print(f"REPRODUCED: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(
        f"NOT REPRODUCED (no capture error in {counts['syncs']} {wait} syncs beside "
        f"{counts['recorded']} recorded sizes x {args.calls} calls)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
