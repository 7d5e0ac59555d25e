"""A racy test: each thread FX-traces a module while the others call theirs eagerly.

`torch.fx.symbolic_trace` patches `torch.nn.Module.__call__` for the whole process while it
traces, so another thread's plain eager call goes through the tracer's wrapper and fails with
`NameError: module is not installed as a submodule` (race R4). Alone in one thread it passes.
"""

import torch
import torch.nn as nn

ROUNDS = 500
"""Trace-then-call rounds per thread: enough that 4 threads meet in every run."""


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_trace_while_others_call_eagerly():
    traced, eager, x = Small(), Small(), torch.randn(4, 8)
    for _ in range(ROUNDS):
        torch.fx.symbolic_trace(traced)
        eager(x)
