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
from f2_parts import compiled_scorer, trace_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


class StepFailed(Exception):
    pass


def main():
    model, batch = compiled_scorer()
    stop, served = threading.Event(), []

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

    threads = [threading.Thread(target=trace_until, args=(stop,)), threading.Thread(target=serve)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if served else 1


if __name__ == "__main__":
    sys.exit(main())
