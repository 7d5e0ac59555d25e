"""One thread: an FX model summary of a model whose backbone was torch.compile'd raises F2's message.

User program: a training script's start-up. It builds a classifier, wraps the backbone in
torch.compile (`model.backbone = torch.compile(model.backbone)`, the way speed-up guides put it),
then, before the first step, prints a per-op summary of the whole model from
torch.fx.symbolic_trace (a habit kept from a quantization workflow). Everything happens in the
main thread; no thread is ever started.
What should happen: the same failure in every run, exit 1. symbolic_trace enters the compiled
backbone (an OptimizedModule is not a leaf module), and Dynamo refuses to run under FX tracing:
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function.
This is not supported at the moment.` That is the message of race F2, but here the tracer and the
compiled call are one thread and one call stack: a misuse, not a race (the fix is to trace the
uncompiled model, or torch.export).
Expected classification: DETERMINISTIC (a catalogued message from a program with one thread is not
a race), no race.
"""

import sys
from collections import Counter

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.backbone(x))


def summarize(model):
    graph = torch.fx.symbolic_trace(model).graph
    ops = Counter(node.op for node in graph.nodes)
    return ", ".join(f"{op}: {n}" for op, n in sorted(ops.items()))


def main():
    torch.manual_seed(0)
    model = Classifier()
    model.backbone = torch.compile(model.backbone)
    print("model built; backbone compiled", flush=True)
    print(f"model summary: {summarize(model)}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(20):
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"trained 20 steps, last loss {loss.item():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
