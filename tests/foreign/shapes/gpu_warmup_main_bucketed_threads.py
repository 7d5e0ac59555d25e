"""GPU: every bucket size warmed in the main thread, then only those sizes called from 3 threads.

User program: a GPU embedding server that pads requests to fixed buckets (8, 16, 32 rows) so
that a torch.compile(mode="reduce-overhead") model never sees a new shape. At start-up the main
thread compiles the model and calls it 3 times per bucket (warm-up, CUDA graph recording,
replay), as the CUDA graphs notes advise; then a ThreadPoolExecutor of 3 threads serves 300
requests of 1 to 32 rows, each padded to its bucket, `compiled(padded)[:n].cpu()`. The main
thread reads every future's result, so a worker's exception is re-raised there (exit 1). Without
CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA, torch 2.11): no F1 (every bucket's cudagraphified callable is cached,
recorded by the main thread's tree manager, so the workers never ask for their own), but the
workers do not only replay: requests of different buckets follow each other in an order the
warm-up never recorded while other requests' outputs are still alive, so the shared tree records
new paths from a worker thread. A worker thread's first cuBLAS call inside that capture fails
(G1: `CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)`), and another thread's
CUDA call during the capture breaks it (`operation not permitted when stream is capturing`,
`operation failed due to a previous error during capture`). Outputs of the shared graphs read
after another thread's replay may also show F1c's face. Under cublas-handle-init,global-lock
(the fixes diagnose offers for G1 and capture) the recordings are serial and have their handle,
but outputs are still read outside the lock (F1c): the fix is not expected to hold.
Expected classification: CRASH (exit 1), races G1 and capture (predicted; the set may differ).
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

BUCKETS = (8, 16, 32)


def bucket_of(n):
    return next(b for b in BUCKETS if n <= b)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(384, 768), nn.GELU(), nn.Linear(768, 384), nn.LayerNorm(384)).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for b in BUCKETS:  # warm-up, record, replay: every shape the server will use
            for _ in range(3):
                compiled(torch.zeros(b, 384, device="cuda"))
    torch.cuda.synchronize()
    print(f"warmed buckets {BUCKETS}", flush=True)

    @torch.no_grad()
    def embed(rows):
        padded = torch.zeros(bucket_of(rows.shape[0]), 384, device="cuda")
        padded[: rows.shape[0]] = rows
        return compiled(padded)[: rows.shape[0]].cpu()

    gen = torch.Generator().manual_seed(1)
    sizes = torch.randint(1, 33, (300,), generator=gen).tolist()
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="embed") as pool:
        futures = [pool.submit(embed, torch.randn(n, 384, device="cuda")) for n in sizes]
        rows = sum(f.result().shape[0] for f in futures)
    print(f"embedded {len(sizes)} requests, {rows} rows", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
