"""User program: the worker wraps the error (`raise StepFailed(...) from exc`), unnamed threads with a
target, uncaught (F2 / R1).

threading.excepthook prints `Exception in thread Thread-2 (serve):` (Python 3.10+ names a nameless
thread after its target), the cause's traceback, "The above exception was the direct cause of the
following exception:", then StepFailed's. The cause is F2 (FX's process-global tracing flag,
pytorch/pytorch#126024). Exits 1 when the serving thread died.
"""

import sys
import threading

import torch

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


class StepFailed(Exception):
    pass


class Head(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def score(x):
    return torch.sin(x) * 2 + 1


def main():
    model = torch.compile(score, backend="eager")
    batch = torch.randn(4, 8)
    model(batch)
    stop, served = threading.Event(), []

    def trace():
        while not stop.is_set():
            torch.fx.symbolic_trace(Head())

    def serve():
        try:
            for step in range(3000):
                try:
                    model(batch)
                except RuntimeError as exc:
                    raise StepFailed(f"step {step}: scoring failed") from exc
            served.append(True)
        finally:
            stop.set()

    threads = [threading.Thread(target=trace), threading.Thread(target=serve)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if served else 1


if __name__ == "__main__":
    sys.exit(main())
