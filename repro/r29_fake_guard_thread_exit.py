"""r29_fake_guard_thread_exit: a compile after the first compiling thread exited segfaults (CUDA build, no GPU).

Symptom: SIGSEGV in `THCPModule_ensureCUDADeviceGuardSet`, Python frame
  `torch._subclasses.fake_tensor:__enter__`, in whichever thread compiles (or enters
  FakeTensorMode) after the first thread that did so has exited. No exception, no message.
Mechanism: on a CUDA build of torch on a machine without a usable GPU, FakeTensorMode.__enter__
  calls torch._C._ensureCUDADeviceGuardSet(), which replaces the CUDA device-guard implementation
  in the process-wide registry with a fake one owned by a C++ `thread_local` of the calling thread.
  When that thread exits its thread_local is destroyed and the registry keeps the dangling
  pointer; the next call anywhere reads `p->deviceCount()` through it. A thread pool that compiles
  and is replaced, or a compiling worker that ends before another starts, meets it on the first
  later compile.
Trigger: --workers threads one after another each compile a fresh function (backend aot_eager,
  which builds fake tensors) and exit; then the main thread compiles once more.
Affected versions: 2.11.0+cu130 on a machine without a GPU, or with its GPUs hidden by
  `CUDA_VISIBLE_DEVICES=` (measured by the harness: catalogue row r29, versions-cpu; the H200 with
  its GPU hidden 3/3); not the CUDA wheels from 2.12.0 to 2.15.0 there (0/10 each), not a CPU-only
  build (nothing to replace), not a machine with a visible GPU (the real guard stays).
Fix: pin-fake-cuda-guard (call torch._C._ensureCUDADeviceGuardSet() once in the main thread
  before the workers start: the registry then holds the main thread's guard, which lives as long
  as the process, and later calls find a device count and leave it alone).
Upstream: PR #163016 (a no-op CUDA guard under FakeTensorMode on CUDA-less machines, for issue
  #122109) keeps that guard in a thread_local; from 2.12.0 on the same script does not crash.
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=3, help="compiling threads, started one after another")
    args, fs = setup(p)
    if args.workers < 1:
        print("error: --workers must be >= 1", file=sys.stderr)
        return 2
    import torch

    cuda_build = torch.version.cuda is not None
    gpu = cuda_build and torch.cuda.is_available()

    def compile_once(k):
        f = torch.compile(lambda x: x.sin() * k + 1, backend="aot_eager")
        with fs.around_call():
            out = f(torch.ones(4))
        if not torch.allclose(out, torch.ones(4).sin() * k + 1):
            raise AssertionError(f"compiled output of worker {k} differs from eager")
        beat()

    for k in range(args.workers):
        name = f"repro-compiler-{k}"

        def body(k=k, name=name):
            fs.thread_start(name)
            compile_once(k)

        errors = run_threads({name: body}, deadline_s=120)  # joined: its thread_local is gone
        if errors:
            print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
            return 1
    print(f"{args.workers} compiling thread(s) exited; compiling in {threading.current_thread().name}", flush=True)
    compile_once(args.workers)  # a segfault here is the reproduction: the process dies with SIGSEGV
    where = "a GPU is usable" if gpu else ("a CUDA build without a GPU" if cuda_build else "a CPU-only build")
    print(f"NOT REPRODUCED ({args.workers + 1} compiles after thread exits, torch {torch.__version__}, {where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
