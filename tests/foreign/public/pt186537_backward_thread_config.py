"""torch 2.12+ thread-local dynamo config: a worker thread, and even the backward thread, see the default recompile_limit.

Source: pytorch/pytorch#186537 ("torch 2.12 regression: torch.compile thread-local config - even
backward thread has separate config", 2026) https://github.com/pytorch/pytorch/issues/186537

What the reporter saw (dxqb, OneTrainer, torch 2.12, CUDA): since PR #173568 dynamo config
overrides are thread-local. Phase 1 of their repro ("limit set in main thread only (documented
way)") logged

    torch._dynamo hit config.recompile_limit (8)
       function: 'forward' (.../repro_recompile_limit.py:19)

and setting the limit in the training thread too is not enough, "because the backward thread,
launched by torch internally, has its own dynamo config" (checkpointed blocks are recomputed in
the autograd engine's device thread).

Adaptation (the issue's AI-generated repro script itself could not be retrieved; this rebuilds
its two phases from the issue text):
- a Linear(16, 16) module whose compiled `forward` is called through
  `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)` for 12 batch sizes, then backward;
  `torch.compile(..., dynamic=False, backend="eager")` (eager backend: the limit check happens in
  Dynamo before any backend; dynamic=False so that each size is its own cache entry);
- phase 1 sets `torch._dynamo.config.recompile_limit = 64` in the main thread only, phase 2 also
  in the training thread; `torch._dynamo.reset()` between phases;
- device = "cuda" if available else "cpu": on CPU the autograd engine runs backward on the
  calling thread, so phase 2's backward-thread case needs CUDA to show;
- the training thread is joined with a 120 s deadline.
"""
import threading

import torch
from torch.utils.checkpoint import checkpoint

device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x))


def train(block, set_limit_here):
    if set_limit_here:
        torch._dynamo.config.recompile_limit = 64
    print(f"  training thread sees recompile_limit={torch._dynamo.config.recompile_limit}")
    for n in range(1, 13):
        x = torch.randn(n, 16, device=device, requires_grad=True)
        y = checkpoint(block, x, use_reentrant=True)
        y.sum().backward()


for phase, set_in_thread in ((1, False), (2, True)):
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = 64
    label = "limit set in main thread only (documented way)" if phase == 1 else "limit set in main and training thread"
    print(f"Phase {phase} — {label}:")
    block = torch.compile(Block().to(device), dynamic=False, backend="eager")
    t = threading.Thread(target=train, args=(block, set_in_thread))
    t.start()
    t.join(timeout=120)
print(f"device: {device}")
