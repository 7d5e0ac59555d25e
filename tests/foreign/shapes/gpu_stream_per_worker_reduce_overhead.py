"""GPU: a reduce-overhead model served by 4 worker threads, each on its own CUDA stream.

User program: a GPU inference server that overlaps requests the way CUDA guides suggest, one
torch.cuda.Stream per worker thread. The main thread builds an MLP on CUDA, wraps it in
torch.compile(mode="reduce-overhead") (Inductor + CUDA graph trees) and starts 4 workers without
calling it (compilation is lazy); the workers wait on a Barrier until all are up, then each runs
100 requests of one batch size under `with torch.cuda.stream(own_stream)` and reads each result
(`float(y.sum())`). Exceptions in the workers are uncaught; the main thread joins them, prints
how many finished and exits 0. Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA, torch 2.11): F1. The workers miss Dynamo's cache together, so each
compiles its own copy in turn (compile_lock) and makes the first call of a fresh cudagraphified
callable; in every worker but the one whose compile imported torch._inductor.cudagraph_trees the
tree manager's thread-local state is missing: a bare `AssertionError` at `assert
torch._C._is_key_in_tls(attr_name)` (cudagraph_trees get_obj), printed by threading.excepthook.
With the per-thread state seeded and every call locked (cstash-tls-init,global-lock), the workers
share the one recorded graph: its static outputs are read after the lock is released and each
worker replays on its own stream, so a replay can overwrite an output another worker has not read
yet (F1c: `accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run`):
the fix is not expected to hold here.
Expected classification: CRASH (thread exceptions at exit 0), race F1.
"""

import sys
import threading

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

WORKERS, REQUESTS = 4, 100


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    ready = threading.Barrier(WORKERS)
    finished = []

    def worker(i):
        stream = torch.cuda.Stream()
        x = torch.randn(16, 512, device="cuda")
        ready.wait()
        total = 0.0
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(REQUESTS):
                total += float(compiled(x).sum())
        finished.append((i, total))

    print(f"serving on {WORKERS} GPU workers, one stream each", flush=True)
    threads = [threading.Thread(target=worker, args=(i,), name=f"gpu-worker-{i}") for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{len(finished)} of {WORKERS} workers finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
