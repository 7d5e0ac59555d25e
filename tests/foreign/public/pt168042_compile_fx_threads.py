"""A custom torch.compile backend runs Inductor's compile_fx in 50 pool threads at once.

Source: pytorch/pytorch#168042 ("TorchInductor compile breaks when called in a multithreaded
context with GIL off", 2025) https://github.com/pytorch/pytorch/issues/168042

What the reporter saw (julian-reed, 2025-11, free-threaded CPython with the GIL off, CUDA): "I am
aiming to call compile_fx from more than one thread at a time ... this results in a variety of
errors." The issue's reproducer is a custom backend: it runs Inductor's lazy pattern inits first,
deep-copies the graph and its inputs once per thread (`thread_count = 50`), and submits
`compile_fx(gm, *args, **kwargs)` under `torch.no_grad()` to a
`ThreadPoolExecutor(max_workers=thread_count)`. The PT2 repro agent reproduced "Error #1" 3/3 on
2.13.0.dev20260518+cu130 (H100): `BackendCompilerFailed` wrapping
`AssertionError: CURRENT_PATCHER is None in finally block`, raised from `compiled(example_inputs)`.

Adaptation (the backend follows the issue's code up to `futures =`, where the retrievable text
ends; the rest is written from the description):
- each future's result is read in submission order and the backend returns the first compiled
  callable (the rest are discarded);
- the model is a small MLP (Linear 32->64->32, ReLU) on CPU, compiled with
  `torch.compile(model, backend=custom_inductor_backend)` and called once on `example_inputs`
  (randn(8, 32)) in `test_fn`, as the repro agent's script does; its output is checked against
  the eager model;
- the GIL stays on (CPython 3.11, not a free-threaded build), which narrows the windows;
- the failure is printed and the program exits 1 (the agent's repro exited non-zero on failure).
"""

import concurrent.futures
import copy
import sys
import traceback

import torch
import torch.nn as nn
from torch._inductor.compile_fx import compile_fx

thread_count = 50


def custom_inductor_backend(gm, *args, **kwargs):
    # premptively run lazy init to avoid race conditions with pattern loading (the comment)
    from torch._inductor.fx_passes.joint_graph import lazy_init as joint_graph_lazy_init
    from torch._inductor.fx_passes.post_grad import lazy_init as post_grad_lazy_init

    post_grad_lazy_init()
    joint_graph_lazy_init()

    inputs_by_thread = {}
    for i in range(thread_count):
        inputs_by_thread[i] = [copy.deepcopy(gm), copy.deepcopy(args), copy.deepcopy(kwargs)]

    # do inference only
    def compile_with_no_grad(gm, *args, **kwargs):
        with torch.no_grad():
            return compile_fx(gm, *args, **kwargs)

    with concurrent.futures.ThreadPoolExecutor(max_workers=thread_count) as pool:
        futures = [
            pool.submit(compile_with_no_grad, g, *a, **k)
            for g, a, k in (inputs_by_thread[i] for i in range(thread_count))
        ]
        compiled = [f.result() for f in futures]
    return compiled[0]


def test_fn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()
    compiled = torch.compile(model, backend=custom_inductor_backend)
    example_inputs = torch.randn(8, 32)
    with torch.no_grad():
        out = compiled(example_inputs)
        return torch.allclose(out, model(example_inputs), atol=1e-5)


if __name__ == "__main__":
    try:
        ok = test_fn()
    except Exception:
        traceback.print_exc()
        ok = False
    print(f"compile_fx in {thread_count} threads: {'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)
