"""Which of the trainer's kinds of CUDA operation pay a first-use cost, and how much of it is the
driver compiling PTX: each is timed on its first call and its second, in one process.

    CUDA_CACHE_DISABLE=1 python -m tools.first_use_jit   # every PTX-only kernel compiled again
    python -m tools.first_use_jit                        # such kernels from ~/.nv/ComputeCache once there

A kernel shipped only as PTX for the GPU's architecture is compiled by the driver when its module
first loads, and the result kept in ~/.nv/ComputeCache: a host's first process pays for it, later
ones read it back. An operation whose first call is much slower with the cache off than with it on
loads such a kernel. Prints one line per operation: first and second call, milliseconds.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROWS, LENGTH, HIDDEN, INTER, HEADS, HEAD_DIM, VOCAB = 8, 128, 512, 1536, 8, 64, 4096
"""gpu-default's sizes: the target's first forward, the drafter's attention and the vocabulary."""


def operations(dev: torch.device) -> dict[str, Callable[[], object]]:
    x = torch.full((ROWS * LENGTH, HIDDEN), 0.02, device=dev)
    w = torch.full((INTER, HIDDEN), 0.02, device=dev)
    q = torch.full((ROWS, HEADS, LENGTH, HEAD_DIM), 0.02, device=dev)
    mask = torch.ones(LENGTH, LENGTH, dtype=torch.bool, device=dev)
    ids = torch.arange(ROWS * LENGTH, device=dev) % VOCAB
    table = torch.full((VOCAB, HIDDEN), 0.02, device=dev)
    p = torch.nn.Parameter(torch.full((INTER, HIDDEN), 0.02, device=dev))
    p.grad = torch.full_like(p, 0.01)
    adamw = torch.optim.AdamW([p], lr=1e-3)

    def attention_backward():
        qq = q.clone().requires_grad_()
        F.scaled_dot_product_attention(qq, qq, qq, attn_mask=mask).sum().backward()

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(*(q.bfloat16(),) * 3, is_causal=True)

    def cross_entropy_backward():
        logits = (x[:, :64] @ table[:, :64].T).requires_grad_()
        F.cross_entropy(logits, ids).backward()

    return {
        "gemm bf16": lambda: F.linear(x.bfloat16(), w.bfloat16()),
        "gemm fp32": lambda: F.linear(x, w),
        "sdpa causal bf16 flash": flash,
        "sdpa causal bf16 any": lambda: F.scaled_dot_product_attention(*(q.bfloat16(),) * 3, is_causal=True),
        "sdpa masked fp32": lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
        "sdpa masked fp32 backward": attention_backward,
        "embedding bf16": lambda: F.embedding(ids, table.bfloat16()),
        "rms norm fp32": lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
        "silu * mul bf16": lambda: F.silu(x.bfloat16()) * x.bfloat16(),
        "cross entropy backward": cross_entropy_backward,
        "argmax": lambda: x.argmax(-1),
        "adamw step": adamw.step,
    }


def timed(fn: Callable[[], object], dev: torch.device) -> float:
    torch.cuda.synchronize(dev)
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize(dev)
    return (time.perf_counter() - t) * 1000


def main() -> int:
    dev = torch.device("cuda:0")
    t = time.perf_counter()
    torch.zeros(1, device=dev)
    print(
        f"cache {'off' if os.environ.get('CUDA_CACHE_DISABLE') == '1' else 'on'}; context {1000 * (time.perf_counter() - t):.0f} ms"
    )
    for name, fn in operations(dev).items():
        first, second = timed(fn, dev), timed(fn, dev)
        print(f"{name:28s} first {first:8.1f} ms  second {second:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
