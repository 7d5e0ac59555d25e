"""User program: the main thread raises an ExceptionGroup of its workers' errors (F2 / R1).

Two scoring workers keep their exceptions; the main thread raises
`ExceptionGroup("2 scoring workers failed", errors)` (PEP 654), printed with the `| ` drawing.
The members are F2 (FX's process-global tracing flag, pytorch/pytorch#126024).
"""

import sys
import threading

import torch
from f2_parts import compiled_scorer, trace_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch = compiled_scorer()
    stop, errors, lock = threading.Event(), [], threading.Lock()

    def serve():
        try:
            for _ in range(3000):
                model(batch)
        except Exception as exc:
            with lock:
                errors.append(exc)

    tracer = threading.Thread(target=trace_until, args=(stop,), name="tracer")
    workers = [threading.Thread(target=serve, name=f"scorer-{i}") for i in range(2)]
    tracer.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    tracer.join()
    if errors:
        raise ExceptionGroup(f"{len(errors)} scoring workers failed", errors)


if __name__ == "__main__":
    main()
