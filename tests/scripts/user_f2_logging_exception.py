"""User program: a worker catches and logs with logging.exception, timestamps in the format (F2 / R1).

The worker's handler logs `compiled call failed in thread <name>` with the traceback
(logging.exception) behind an `%(asctime)s %(levelname)s %(name)s:` prefix, stops, and the main
thread exits 1. The failure is F2: another thread's torch.fx.symbolic_trace holds FX's
process-global tracing flag (pytorch/pytorch#126024).
"""

import logging
import sys
import threading

import torch
from f2_parts import compiled_scorer, trace_until

log = logging.getLogger("scorer")
sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    model, batch = compiled_scorer()
    stop, failed = threading.Event(), threading.Event()

    def serve():
        try:
            for _ in range(3000):
                model(batch)
        except Exception:
            log.exception("compiled call failed in thread %s", threading.current_thread().name)
            failed.set()
        finally:
            stop.set()

    threads = [
        threading.Thread(target=trace_until, args=(stop,), name="tracer"),
        threading.Thread(target=serve, name="scorer-0"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.info("done, failed=%s", failed.is_set())
    return 1 if failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
