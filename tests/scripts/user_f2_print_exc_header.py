"""User program: prints its own `Exception in thread NAME` line, then traceback.print_exc() (F2 / R1).

The caller thread catches the exception, prints a header of its own (no trailing colon, unlike
threading.excepthook's), then the traceback, and records the failure; exit 1. Another thread's
torch.fx.symbolic_trace holds FX's process-global tracing flag (pytorch/pytorch#126024).
"""

import sys
import threading
import traceback

import torch

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


class Head(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def score(x):
    return torch.sin(x) * 2 + 1


def main():
    model = torch.compile(score, backend="eager")
    batch = torch.randn(4, 8)
    model(batch)
    stop, failures = threading.Event(), []

    def trace():
        while not stop.is_set():
            torch.fx.symbolic_trace(Head())

    def call():
        try:
            for _ in range(3000):
                model(batch)
        except RuntimeError as exc:
            print(f"Exception in thread {threading.current_thread().name}", file=sys.stderr)
            traceback.print_exc()
            failures.append(exc)
        finally:
            stop.set()

    tracer = threading.Thread(target=trace, name="tracer")
    caller = threading.Thread(target=call, name="caller")
    tracer.start()
    caller.start()
    caller.join()
    tracer.join()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
