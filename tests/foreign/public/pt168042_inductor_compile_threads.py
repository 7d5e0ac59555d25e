"""TorchInductor compile called from several threads breaks (CURRENT_PATCHER and friends).

Source: pytorch/pytorch#168042 ("TorchInductor compile breaks when called in a multithreaded
context with GIL off", 2025) https://github.com/pytorch/pytorch/issues/168042

What the reporter saw (julian-reed, 2025-11, free-threaded CPython with the GIL off, CUDA):
several errors when threads compile at once; the PT2 repro agent reproduced "Error #1" 3/3 on
2.13.0.dev20260518+cu130 (H100): `BackendCompilerFailed` wrapping
`AssertionError: CURRENT_PATCHER is None in finally block`, raised from
`compiled(example_inputs)` in its repro's `test_fn`. PRs #168174/#168999 list errors 1-4 of this
issue as global Dynamo/Inductor state raced by concurrent compile_fx calls.

Adaptation (the issue body's script could not be retrieved; this follows the thread's
description: several threads each compile a module with Inductor and call it):
- 4 threads, each with its own small MLP (Linear 32->64->32, ReLU), `torch.compile`d with the
  default Inductor backend and called once on `example_inputs`; each thread catches its
  exception and records it, and the main thread prints them after the joins;
- the GIL stays on (CPython 3.11 here, not a free-threaded build), which narrows the windows;
- device = "cuda" if torch.cuda.is_available() else "cpu" (the races are in Python state the
  compile shares, not in the device);
- threads joined with a 150 s deadline; exit status 1 when a thread raised (the agent's repro
  exited non-zero on failure).
"""
import sys
import threading
import traceback

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
errors = []


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)
    ).to(device)


def test_fn(idx):
    try:
        model = make_model()
        compiled = torch.compile(model)
        example_inputs = torch.randn(8 + idx, 32, device=device)
        compiled(example_inputs)
    except BaseException as e:
        errors.append((idx, traceback.format_exc()))


threads = [threading.Thread(target=test_fn, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=150)
print(f"device: {device}; threads failed: {len(errors)}/4")
for idx, tb in errors[:2]:
    print(f"--- thread {idx} ---")
    print(tb)
sys.exit(1 if errors else 0)
