"""torch.compile + cudagraphs asserts in a multithreaded context (cudagraph tree TLS missing).

Source: pytorch/pytorch#123177 ("torch.compile+cudagraphs asserts in multithreaded context", 2024)
https://github.com/pytorch/pytorch/issues/123177

What the reporter saw (suo, 2024-04, torch 2.3 nightly, CUDA): worker threads calling one compiled
function with CUDA graphs fail in `torch/_inductor/cudagraph_trees.py:get_obj` with
`assert torch._C._is_key_in_tls(attr_name)` (AssertionError). The PT2 repro agent confirmed it in
the thread on 2.13.0.dev20260518+cu130, H100: "8/32 worker threads failed with AssertionError".

This program is the repro agent's script from the issue thread (the issue body's script, wrapped
in a test function): 32 threads each call `torch.compile(foo, mode="max-autotune")` once.

Adaptation:
- The agent's bisect scaffolding (`_LAST_ERRORS` module global, `TORCH_COMPILE_BACKEND` env
  switch) is dropped; the inductor path it defaults to is kept.
- The agent's own `device = "cuda" if torch.cuda.is_available() else "cpu"` is kept, so on a
  machine without CUDA the same 32 threads compile and call on CPU (no CUDA graphs there: the
  TLS assert itself needs CUDA; other thread races of the compile can still show).
- Threads joined with a 120 s deadline (the agent joined without one).
- Exit status as in the agent's script: 1 when any worker raised, else 0.
"""
import sys
import threading
import traceback

import torch


def foo(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


def test_fn() -> bool:
    """Return True if NO bug (no exception in any thread). False if bug present."""
    torch._dynamo.reset()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    # mode="max-autotune" triggers cudagraphs (the buggy code path).
    opt_foo = torch.compile(foo, mode="max-autotune")

    errors: list = []
    err_lock = threading.Lock()

    def worker():
        try:
            x = torch.rand(2, 3, device=device)
            y = torch.rand(2, 3, device=device)
            opt_foo(x, y)
        except BaseException as e:
            with err_lock:
                errors.append((type(e).__name__, str(e), traceback.format_exc()))

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    alive = [t for t in threads if t.is_alive()]
    if alive:
        print(f"{len(alive)}/32 worker threads still running after the deadline")
    print(f"device: {device}")
    print(f"Worker errors observed: {len(errors)}/32 threads failed")
    if errors:
        print(f"Distinct exception types: {sorted({e[0] for e in errors})}")
        print("--- First captured traceback ---")
        print(errors[0][2])
    return not errors and not alive


if __name__ == "__main__":
    ok = test_fn()
    sys.exit(0 if ok else 1)
