"""User program: workers record exceptions into a list; the main thread re-raises the first (F2 / R1).

`raise errors[0]` prepends the main thread's frames to the worker's traceback, so the printed
traceback starts at `<module>` although the exception was raised in a worker. Which worker is not
in the output. The failure is F2 (FX's process-global tracing flag, pytorch/pytorch#126024).
"""

import sys
import threading

import torch
from f2_parts import compiled_scorer, trace_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def run_workers(model, batch):
    errors, stop = [], threading.Event()

    def call():
        try:
            for _ in range(3000):
                model(batch)
        except Exception as exc:
            errors.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=trace_until, args=(stop,)), threading.Thread(target=call)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def main():
    model, batch = compiled_scorer()
    run_workers(model, batch)


if __name__ == "__main__":
    main()
