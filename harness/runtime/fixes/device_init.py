"""Per-device and per-process initialisation torch does lazily in the wrong thread: the thread's
cuBLAS handle (cublas-handle-init) and the no-GPU CUDA device guard (pin-fake-cuda-guard)."""

from __future__ import annotations

import threading
from typing import Any

from harness.runtime.fixes.base import Fix


class CublasHandleInit(Fix):
    """Create the thread's cuBLAS handle on its device before its first compiled call.

    PyTorch keeps one cuBLAS handle per (thread, device), made by the thread's first matmul. If
    that matmul is inside a CUDA graph capture (a thread whose first compiled call records
    rather than warms up), `cublasCreate` fails there: "CUBLAS_STATUS_NOT_INITIALIZED when calling
    `cublasCreate(handle)`" at capture_end. H200, torch 2.11: r04 under global-lock 4/4 and the
    trainer under global-lock + cstash-tls-init + persistent-buffers 1/1 (results/gpu-diag,
    docs/log/2026-11-29-dflash-trainer-on-h200.md), the lock ruling out a second thread's
    interleaving. Catalogued as G1 (first seen on the GPU trainer). PyTorch's CUDA graphs notes
    ask for warm-up iterations before capture for the same reason
    (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs). One of the five fixes of the
    configuration REPORT.md recommends on one H200.
    """

    name = "cublas-handle-init"
    targets = ("G1",)
    upstream = ("https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",)

    def on_device(self, device: Any) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        if getattr(device, "type", None) != "cuda":
            return False
        with torch.cuda.device(device):
            torch.cuda.current_blas_handle()
        return True


class PinFakeCudaGuard(Fix):
    """Install the no-GPU CUDA device guard once from the main thread, before the workers start.

    On a CUDA build of torch 2.11 on a machine without a GPU, every FakeTensorMode entry (every
    compile) calls torch._C._ensureCUDADeviceGuardSet, which puts a guard owned by the calling
    thread's C++ thread_local into the process-wide registry; once that thread exits, the next
    entry in any thread calls through the freed guard: SIGSEGV (race fake-guard-exit, repro r29).
    Called from the main thread, the registry holds a guard that lives as long as the process, and
    later entries find a device count and leave it alone. A no-op on a CPU-only build, with a GPU,
    and outside the main thread. PR #163016 (the fake guard for FakeTensorMode on CUDA-less
    machines, issue #122109) put it in a thread_local.
    """

    name = "pin-fake-cuda-guard"
    targets = ("fake-guard-exit",)
    upstream = ("#163016", "#122109")

    def process_start(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # a worker's guard is what dangles: pinning it there would be the bug
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        ensure = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)
        if ensure is None or torch.version.cuda is None:
            return False
        ensure()
        return True
