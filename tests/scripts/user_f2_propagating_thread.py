"""User program: a Thread subclass that keeps its exception and re-raises it from join() (F2 / R1).

The common "PropagatingThread" recipe: run() stores the exception, join() raises it in the joining
(main) thread, so the traceback runs from `<module>` through join's `raise self.exc` into the
worker's frames. The failure is F2 (FX's process-global tracing flag, pytorch/pytorch#126024).
"""

import sys
import threading

import torch
from f2_parts import compiled_scorer, trace_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


class PropagatingThread(threading.Thread):
    exc = None

    def run(self):
        try:
            super().run()
        except BaseException as exc:
            self.exc = exc

    def join(self, timeout=None):
        super().join(timeout)
        if self.exc is not None:
            raise self.exc


def main():
    model, batch = compiled_scorer()
    stop = threading.Event()

    def serve():
        try:
            for _ in range(3000):
                model(batch)
        finally:
            stop.set()

    tracer = PropagatingThread(target=trace_until, args=(stop,), name="tracer")
    server = PropagatingThread(target=serve, name="server")
    tracer.start()
    server.start()
    server.join()
    tracer.join()


if __name__ == "__main__":
    main()
