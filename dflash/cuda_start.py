"""Each CUDA device's first use, made in a named thread while the host builds the target.

A process's first GEMM and attention on a GPU read cuBLAS, cuDNN and their kernels from disk: on
a fresh H100 host the corpus phase (the target's first forward) and the first step took 1.0 s
and 0.9 s, against 0.3 s and 0.4-0.6 s in a warm process. `CudaStart` creates each device's
context and makes those first uses (in the target's dtype, then float32 forward and backward as
the drafter trains) while the main thread draws the target's seeded weights on the CPU; `join`
waits for it and raises what it raised. With the page cache dropped, gpu-default then spent
2.3-3.3 s outside training after its imports, against 2.6-5.3 s without it, on two H100 hosts
(on one the same within noise); warm, about the same (results/h100-2026-12-05-cuda-start).

It is a handful of ops on purpose: each one hands the GIL to the main thread's Python and waits
for it back. A one-layer model's forward, backward and optimizer step there (hundreds of ops)
took 3-4 s and slowed the target's build from 0.7 s to 1.8-2.6 s, a loss on every run. It draws
no random number, so the run's seeded streams stay as they were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from dflash.llama import LlamaShape

JOIN_S = 300.0
"""How long the main thread waits for it: a device that has not answered by then never will."""
ROWS, LENGTH = 8, 128
"""The first uses' batch: the size of the target's first real forward (the shipped corpus's probe)."""


def first_use(device: torch.device, shape: LlamaShape, dtype: torch.dtype) -> None:
    """A GEMM and a causal attention forward in `dtype`, then a float32 GEMM and masked attention,
    forward and backward, at `shape`'s sizes on `device`; every value a constant."""
    heads, d = shape.num_attention_heads, shape.head_dim
    x = torch.full((ROWS * LENGTH, shape.hidden_size), 0.02, device=device)
    w = torch.full((shape.intermediate_size, shape.hidden_size), 0.02, device=device)
    with torch.no_grad():
        F.linear(x.to(dtype), w.to(dtype))
        q = torch.full((ROWS, heads, LENGTH, d), 0.02, device=device, dtype=dtype)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    w.requires_grad_()
    q = torch.full((ROWS, heads, LENGTH, d), 0.02, device=device, requires_grad=True)
    mask = torch.ones(LENGTH, LENGTH, dtype=torch.bool, device=device)
    (F.linear(x, w).sum() + F.scaled_dot_product_attention(q, q, q, attn_mask=mask).sum()).backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CudaStart:
    """`first_use` on each device, in the thread `dflash-cuda-start`."""

    def __init__(self, devices: Sequence[torch.device], shape: LlamaShape, dtype: torch.dtype) -> None:
        self.devices, self.shape, self.dtype = tuple(devices), shape, dtype
        self.done_at: float | None = None
        """time.monotonic() when the last device was ready."""
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dflash-cuda-start", daemon=True)

    def start(self) -> CudaStart:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for d in self.devices:
                first_use(d, self.shape, self.dtype)
        except BaseException as e:  # noqa: BLE001  raised again in the thread that joins
            self._error = e
        self.done_at = time.monotonic()

    def join(self, timeout: float = JOIN_S) -> None:
        """Wait for every device; its exception, or RuntimeError if it is still running after `timeout`."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the CUDA devices' first use did not finish within {timeout:.0f} s")
        if self._error is not None:
            raise self._error
