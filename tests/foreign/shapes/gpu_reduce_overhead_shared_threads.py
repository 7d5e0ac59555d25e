"""GPU: a reduce-overhead (CUDA graph trees) model warmed in the main thread, then called from 3 threads.

User program: a GPU inference server. The main thread builds a small MLP on CUDA, compiles it
with torch.compile(mode="reduce-overhead") (Inductor + CUDA graph trees) and warms it up with a
few calls (so the graph is recorded in the main thread); then three request threads call the
same compiled model 200 times each, alternating the warmed batch size (32) and a batch size of
their own (8, 16, 24), cloning the outputs. Exceptions in the request threads are uncaught; the
main thread joins them and exits 0. Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA): F1 on torch builds whose cudagraph trees keep their per-thread state
in a C++ TLS stash that a fresh thread lacks (2.11): a thread's call that needs the tree manager
(its own batch size: warm-up/record) raises a bare `AssertionError` at `assert
torch._C._is_key_in_tls(attr_name)` in torch/_inductor/cudagraph_trees.py get_obj (printed by
threading.excepthook; exit 0). With the warmed size alone (an earlier version of this program)
the threads did not assert: on an H200 with torch 2.11, 2 of 3 runs were clean and 1 failed with
G1's `CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)` and the capture face
`operation failed due to a previous error during capture`. Where each thread gets its own state
(2.13, PR #184357, predicted), the threads share the tree manager and pool the main thread
recorded: F1c faces (`accessing tensor output of CUDAGraphs that has been overwritten by a
subsequent run`, `beginAllocateToPool: already recording to mempool_id`, a check_memory_pool or
dealloc_current_path_weakrefs assertion), capture or G1 faces, or a silent run.
Expected classification: CRASH (thread exceptions at exit 0), races F1 (2.11) or F1c / capture / G1.
"""

import sys
import threading

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    x0 = torch.randn(32, 256, device="cuda")
    with torch.no_grad():
        for _ in range(3):  # warm-up + record in the main thread
            compiled(x0)
    torch.cuda.synchronize()
    done = []

    def request(i):
        # Most requests have the warmed batch size; every other one the thread's own size.
        xs = [torch.randn(32, 256, device="cuda"), torch.randn(8 * (i + 1), 256, device="cuda")]
        with torch.no_grad():
            for k in range(200):
                y = compiled(xs[k % 2]).clone()
        torch.cuda.synchronize()
        done.append((i, float(y.sum())))

    print("serving on 3 GPU threads", flush=True)
    threads = [threading.Thread(target=request, args=(i,), name=f"gpu-request-{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{len(done)} of 3 request threads finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
