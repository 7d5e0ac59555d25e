"""GPU: an Inductor model without CUDA graphs (mode="default") called from 3 threads from the first call on.

User program: a GPU scoring service whose engineer left CUDA graphs off (plain
torch.compile(model), mode="default": Inductor's Triton kernels, no graph trees). Three request
threads start together behind a Barrier, so their first calls (and Dynamo's compile) coincide;
each then scores 150 batches of its own fixed size (16, 32, 48; dynamic=False, one graph per
size) and, at the end, checks its last result against the eager model (`allclose`, raising
AssertionError on a mismatch). Thread exceptions are uncaught; the main thread joins and exits 0.
Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What happens (CUDA, torch 2.11): mostly nothing, and rarely F2. Without CUDA graphs there is no
tree manager, no per-thread graph state and no capture (F1, F1c, G1 and capture need one), and the
duplicate compiles of threads that missed the cache together (F10) stay far below the recompile
limit. But Inductor's compile traces with make_fx, whose is-tracing flag and Module.__call__ patch
are process-global on 2.11: a thread that calls the model while another compiles raises
"Detected that you are using FX to symbolically trace a dynamo-optimized function" (1 raw run of 4
on an H100, 2026-12-06; none in 20 before). global-lock, which serialises compiles and calls, holds.
Expected classification: CRASH as F2, rare (raw runs may all pass).
"""

import sys
import threading

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

SIZES = (16, 32, 48)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.SiLU(), nn.Linear(512, 256), nn.Tanh()).cuda().eval()
    compiled = torch.compile(model, mode="default", dynamic=False)
    start = threading.Barrier(len(SIZES))
    ok = []

    def serve(size):
        x = torch.randn(size, 256, device="cuda")
        start.wait()
        with torch.no_grad():
            for _ in range(150):
                y = compiled(x)
            expected = model(x)
        if not torch.allclose(y, expected, atol=1e-3, rtol=1e-3):
            raise AssertionError(
                f"batch {size}: compiled result differs from eager by {(y - expected).abs().max():.3g}"
            )
        ok.append(size)

    print(f"serving batch sizes {SIZES} on {len(SIZES)} threads (no CUDA graphs)", flush=True)
    threads = [threading.Thread(target=serve, args=(s,), name=f"score-{s}") for s in SIZES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{len(ok)} of {len(SIZES)} threads matched eager", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
