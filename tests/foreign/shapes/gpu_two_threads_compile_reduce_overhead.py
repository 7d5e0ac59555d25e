"""GPU: two threads each compile and run their own reduce-overhead model at the same time.

User program: a two-model GPU pipeline (an encoder thread and a ranker thread). Each thread
builds its own small model on CUDA, compiles it with torch.compile(mode="reduce-overhead")
(Inductor + CUDA graph trees), and runs it 100 times; a threading.Barrier makes them start
together. Thread exceptions are uncaught; the main thread joins and exits 0. Without CUDA it
prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA): concurrent compiles and CUDA graph recordings in two threads. On 2.11:
F1 (`assert torch._C._is_key_in_tls(attr_name)` in cudagraph_trees get_obj, the threads are
fresh) or, where a thread does get a tree, capture-race faces when one thread's recording meets
the other's kernels (`operation not permitted when stream is capturing`, `operation failed due
to a previous error during capture`, `Offset increment outside graph capture`) or F1c
(`beginAllocateToPool: already recording to mempool_id`). Inductor compiles in two threads can
also meet FX's global patcher (F3: `CURRENT_PATCHER is None in finally block`).
Seen on an H200 with torch 2.11 (4 of 4 runs): one of the two threads dies of the F1 assert, the
other finishes (`1 of 2 models finished`), exit 0.
Expected classification: CRASH, races F1 / capture / F1c (whichever face the torch build shows).
"""

import sys
import threading

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)


def main():
    start = threading.Barrier(2)
    finished = []

    def run(name, width):
        torch.manual_seed(width)
        model = (
            torch.nn.Sequential(torch.nn.Linear(width, width * 2), torch.nn.SiLU(), torch.nn.Linear(width * 2, width))
            .cuda()
            .eval()
        )
        compiled = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(16, width, device="cuda")
        start.wait()
        with torch.no_grad():
            for _ in range(100):
                y = compiled(x).clone()
        torch.cuda.synchronize()
        finished.append((name, float(y.sum())))

    print("starting encoder and ranker", flush=True)
    threads = [
        threading.Thread(target=run, args=("encoder", 128), name="encoder"),
        threading.Thread(target=run, args=("ranker", 192), name="ranker"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{len(finished)} of 2 models finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
