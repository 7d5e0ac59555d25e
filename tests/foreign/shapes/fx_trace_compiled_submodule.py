"""One thread: an FX graph rewrite of a model whose encoder was torch.compile'd raises F2's message.

User program: a serving script's start-up. The encoder of a small tagger is torch.compile'd for
speed (`model.encoder = torch.compile(model.encoder)`), then the whole model goes through
torch.fx.symbolic_trace so that a graph pass can swap every GELU for a tanh-approximated one (the
FX tutorial's "replace an op" pass) before the rewritten GraphModule is checked against the model
on a batch. The compiled encoder takes two tensors (tokens and a padding mask), so the tracer hands
it two FX Proxies. Everything happens in the main thread; no thread is ever started.
What should happen: the same failure in every run, exit 1. symbolic_trace enters the compiled
encoder (an OptimizedModule is not a leaf module) and Dynamo refuses to run under FX tracing:
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function.
This is not supported at the moment.` That is F2's message with the tracer and the compiled call
in one thread and one call stack: a misuse, not a race (trace the uncompiled model, or use
torch.export). With error_on_nested_fx_trace=False (nested-fx-fallback) the encoder runs eagerly
under the trace, its ops land in the graph, and the program passes (`rewrote N GELU nodes`).
Expected classification: DETERMINISTIC, no race.
"""

import sys

import torch
import torch.fx
import torch.nn as nn

torch.set_num_threads(1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.mix = nn.Linear(32, 32)

    def forward(self, x, mask):
        h = nn.functional.gelu(self.embed(x))
        return nn.functional.gelu(self.mix(h)) * mask


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(32, 5)

    def forward(self, x, mask):
        return self.head(self.encoder(x, mask))


def tanh_gelu(x):
    return nn.functional.gelu(x, approximate="tanh")


def rewrite_gelu(model):
    """Trace the model and point every exact GELU at the tanh approximation."""
    traced = torch.fx.symbolic_trace(model)
    swapped = 0
    for node in traced.graph.nodes:
        if node.op == "call_function" and node.target is nn.functional.gelu:
            node.target = tanh_gelu
            swapped += 1
    traced.recompile()
    return traced, swapped


def main():
    torch.manual_seed(0)
    model = Tagger().eval()
    model.encoder = torch.compile(model.encoder)
    print("model built; encoder compiled", flush=True)
    traced, swapped = rewrite_gelu(model)
    print(f"rewrote {swapped} GELU nodes", flush=True)
    x, mask = torch.randn(8, 16), (torch.rand(8, 1) > 0.2).float()
    with torch.no_grad():
        gap = (traced(x, mask) - model(x, mask)).abs().max().item()
    print(f"rewritten vs compiled model: max abs difference {gap:.2e}")
    return 0 if gap < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
