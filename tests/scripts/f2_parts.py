"""What the F2 user programs share, so that each holds only its own threads and its own way of
reporting a thread's failure (what it tests): a scorer compiled in the main thread, and an FX
tracer whose process-global tracing flag makes another thread's compiled call raise F2
(pytorch/pytorch#126024)."""

import torch


class Head(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def score(x):
    return torch.sin(x) * 2 + 1


def compiled_scorer():
    """The scorer compiled, and called once in the main thread, as a service warms up."""
    model = torch.compile(score, backend="eager")
    batch = torch.randn(4, 8)
    model(batch)
    return model, batch


def trace_until(stop):
    """FX-trace the head over and over until `stop` is set (an exporter thread)."""
    while not stop.is_set():
        torch.fx.symbolic_trace(Head())
