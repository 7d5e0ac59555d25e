"""GPU: a max-autotune compiled classifier mapped over batches by a 4-thread ThreadPoolExecutor.

User program: offline batch inference. The main thread builds a small classifier on CUDA and
compiles it with torch.compile(mode="max-autotune") (Inductor GEMM autotuning, and CUDA graph
trees, which that mode turns on); then `ThreadPoolExecutor(4).map(predict, batches)` labels 64
batches of 64 rows, `predict` returning `compiled(x).argmax(-1).cpu()`. Nothing is called before
the pool starts, so the first calls (and the autotuning) happen in the pool's threads. map()
re-raises a worker's exception in the main thread when its result is read: an uncaught traceback
from `main`, exit 1. Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA, torch 2.11): F1, as in pytorch#123177 (whose reproducer also uses
max-autotune). The 4 threads miss Dynamo's cache together and compile in turn; each later
compile's fresh cudagraphified callable asks for the calling thread's tree manager, which a pool
thread lacks: a bare `AssertionError` at `assert torch._C._is_key_in_tls(attr_name)` in
cudagraph_trees get_obj, re-raised from `concurrent.futures` `result()`. Under
cstash-tls-init,global-lock the threads share one recorded graph whose static outputs are read
(`.cpu()`) after the lock is released, so one thread's replay can overwrite another's output
(F1c): the fix is not expected to hold.
Expected classification: CRASH (exit 1), race F1.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda().eval()
    compiled = torch.compile(model, mode="max-autotune")
    batches = [torch.randn(64, 256, device="cuda") for _ in range(64)]

    @torch.no_grad()
    def predict(x):
        return compiled(x).argmax(-1).cpu()

    print("labelling 64 batches on 4 threads", flush=True)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="infer") as pool:
        labels = torch.cat(list(pool.map(predict, batches)))
    print(f"labelled {labels.numel()} rows; class histogram {torch.bincount(labels, minlength=10).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
