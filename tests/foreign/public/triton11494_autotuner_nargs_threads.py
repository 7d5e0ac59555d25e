"""Triton's Autotuner is not thread-safe: two threads autotuning one kernel with a cold cache crash.

Source: triton-lang/triton#11494 ("Autotuner is not thread-safe: concurrent autotuning of the same
kernel crashes", 2026) https://github.com/triton-lang/triton/issues/11494

What the reporter saw (turboderp, ExLlamaV3's threaded quantization; torch + triton, one CUDA
device): `Autotuner.run()` keeps the call's arguments in `self.nargs` on the shared kernel and
sets it to None on exit; when two threads call the same autotuned kernel with a cold tuning cache,
the first to finish nulls `nargs` while the other is still benchmarking, and the other fails on a
None mapping (`TypeError: 'NoneType' object is not a mapping`, the face ExLlamaV3 reported in
turboderp-org/exllamav3#308). The issue's repro sets a fresh TRITON_CACHE_DIR before importing
Triton and has a `--patched` flag that moves `nargs` to thread-local storage.

Adaptation (the repro's kernel and thread section were cut off in the copy available):
- kernel: a vector add autotuned over 4 BLOCK_SIZE configs keyed on n_elements; two threads call
  it at once through a threading.Barrier; each thread records its exception, printed after the
  joins (30 s deadline); exit 1 when a thread raised;
- the `--patched` monkey-patch is left out;
- without CUDA (or without triton) the program prints `SKIP: needs CUDA` and exits 0.
"""
import os
import sys
import tempfile
import threading
import traceback

_cache_dir = tempfile.mkdtemp(prefix="triton_race_cache_")
os.environ["TRITON_CACHE_DIR"] = _cache_dir

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)
try:
    import triton
    import triton.language as tl
except ImportError:
    print("SKIP: needs CUDA (triton not installed)")
    sys.exit(0)


@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": b}) for b in (128, 256, 512, 1024)],
    key=["n_elements"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n)
    return out


errors = []
barrier = threading.Barrier(2)


def worker(i):
    try:
        x = torch.randn(1 << 20, device="cuda")
        y = torch.randn(1 << 20, device="cuda")
        barrier.wait()
        out = add(x, y)
        torch.cuda.synchronize()
        assert torch.allclose(out, x + y)
    except BaseException:
        errors.append((i, traceback.format_exc()))


threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=30)
print(f"threads failed: {len(errors)}/2")
for i, tb in errors:
    print(f"--- thread {i} ---")
    print(tb)
sys.exit(1 if errors else 0)
