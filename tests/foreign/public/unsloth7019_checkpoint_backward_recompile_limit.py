"""A fullgraph kernel recomputed by gradient checkpointing in the autograd thread hits the default recompile_limit.

Source: unslothai/unsloth#7019 ("Restore process-global torch.compile config on torch 2.12 so
gradient checkpointing backward honors it", 2026) https://github.com/unslothai/unsloth/pull/7019

What the reporter saw (danielhanchen, torch 2.12, CUDA; gpt-oss GRPO/SFT with gradient
checkpointing): at the first training step's backward
`torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to fullgraph=True`.
Unsloth raises `config.recompile_limit` to 1024 on the main thread; the autograd engine runs
backward on its own worker thread, which reads the default 8; the `@torch.compile(fullgraph=True)`
kernels' cache already holds more than 8 entries, so the first guard miss inside backward fails.

Adaptation (the PR's "Minimal reproduction" block was not retrievable; built from its text):
- one `@torch.compile(fullgraph=True, dynamic=False, backend="eager")` kernel (silu(x @ w)),
  called through `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)` for 10 sequence
  lengths, so 10 cache entries exist (forward runs under no_grad there) before a backward
  recomputes it with grad enabled (a guard miss); eager backend because the limit check is in
  Dynamo, before any backend;
- `torch._dynamo.config.recompile_limit = 1024` set on the main thread, as Unsloth does;
- device = "cuda" if available else "cpu": on CPU, backward runs on the calling (main) thread,
  which sees 1024, so the failure needs CUDA's autograd device thread;
- the exception propagates out of `.backward()` and ends the program (exit 1), as in training.
"""
import torch
from torch.utils.checkpoint import checkpoint

device = "cuda" if torch.cuda.is_available() else "cpu"
torch._dynamo.config.recompile_limit = 1024  # unsloth_zoo/patching_utils.py, main thread


@torch.compile(fullgraph=True, dynamic=False, backend="eager")
def kernel(x, w):
    return torch.nn.functional.silu(x @ w)


w = torch.randn(16, 16, device=device, requires_grad=True)
outs = []
for seq in range(1, 11):
    x = torch.randn(seq, 16, device=device, requires_grad=True)
    outs.append(checkpoint(kernel, x, w, use_reentrant=True).sum())
print(f"device: {device}; forward done, {len(outs)} cache entries; running backward")
torch.stack(outs).sum().backward()
print("backward done")
