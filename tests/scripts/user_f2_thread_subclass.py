"""User program: threading.Thread subclasses, uncaught exceptions (F2 / R1).

An inference service keeps a model exporter thread (torch.fx.symbolic_trace in a loop) next to
three request threads that call a compiled function. FX's tracing flag is process-global
(pytorch/pytorch#126024), so a compiled call raises "Detected that you are using FX to
symbolically trace a dynamo-optimized function" in every request thread at about the same moment,
and threading.excepthook may print their tracebacks interleaved line by line (two such runs are
tests/fixtures/tracebacks/f2_fx_trace_of_compiled_fn/4.txt, 5.txt). Exits 1 if a request thread
died.
"""

import sys
import threading

import torch
from f2_parts import Head, score

sys.setswitchinterval(1e-6)  # the user's "make threads fair" tweak; widens the window
torch.set_num_threads(1)


class Exporter(threading.Thread):
    def __init__(self, stop):
        super().__init__(name="exporter", daemon=True)
        self.stop = stop

    def run(self):
        while not self.stop.is_set():
            torch.fx.symbolic_trace(Head())


class RequestThread(threading.Thread):
    def __init__(self, i, model, batch):
        super().__init__(name=f"request-{i}")
        self.model, self.batch, self.served = model, batch, 0

    def run(self):
        for _ in range(2000):
            self.model(self.batch)
            self.served += 1


def main():
    model = torch.compile(score, backend="eager")
    batch = torch.randn(4, 8)
    model(batch)  # warm up before serving
    stop = threading.Event()
    Exporter(stop).start()
    workers = [RequestThread(i, model, batch) for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    return 0 if all(w.served == 2000 for w in workers) else 1


if __name__ == "__main__":
    sys.exit(main())
