"""User program: prints its own `Exception in thread NAME` line, then traceback.print_exc() (F2 / R1).

The caller thread catches the exception, prints a header of its own (no trailing colon, unlike
threading.excepthook's), then the traceback, and records the failure; exit 1. Another thread's
torch.fx.symbolic_trace holds FX's process-global tracing flag (pytorch/pytorch#126024).
"""

import sys
import threading
import traceback

import torch
from f2_parts import compiled_scorer, trace_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch = compiled_scorer()
    stop, failures = threading.Event(), []

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

    tracer = threading.Thread(target=trace_until, args=(stop,), name="tracer")
    caller = threading.Thread(target=call, name="caller")
    tracer.start()
    caller.start()
    caller.join()
    tracer.join()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
