"""What the R4 user programs share, so that each holds only its own threads and its own way of
reporting a thread's failure: an eager block, and an exporter whose FX trace patches
nn.Module.__call__ process-wide, so that another thread's eager call raises R4's NameError
(pytorch/pytorch#187589)."""

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def export_until(stop):
    """FX-trace a fresh block over and over until `stop` is set (an exporter thread)."""
    while not stop.is_set():
        torch.fx.symbolic_trace(Block())
