"""User program: concurrent.futures, `future.result()` re-raises in the main thread (F2 / R1).

A batch scorer submits an FX export and a scoring loop to one ThreadPoolExecutor and waits on the
scoring future. The export holds FX's process-global tracing flag (pytorch/pytorch#126024), so a
compiled call in the pool worker raises; `future.result()` re-raises it in the main thread, whose
traceback then shows the main thread's frames and the worker's. Uncaught: exit 1.
"""

import concurrent.futures
import sys
import threading

import torch
from f2_parts import Head, compiled_scorer

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def export_forever(stop):
    while not stop.is_set():
        torch.fx.symbolic_trace(Head())


def score_batches(model, batch, n):
    return sum(float(model(batch).sum()) for _ in range(n))


def main():
    model, batch = compiled_scorer()
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        pool.submit(export_forever, stop)
        scored = pool.submit(score_batches, model, batch, 3000)
        try:
            print(f"total {scored.result():.3f}")
        finally:
            stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
