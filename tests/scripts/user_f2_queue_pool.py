"""User program: a worker pool fed by a queue.Queue; workers put tracebacks on a results queue and
the main thread reports them (F2 / R1).

Unnamed workers (`Thread-3 (worker)`) score requests; one request kind runs
torch.fx.symbolic_trace (a model export), which holds FX's process-global tracing flag
(pytorch/pytorch#126024) while other workers call the compiled scorer. The main thread prints
`request <i> failed in thread <name>:` and the traceback text, then exits 1.
"""

import queue
import sys
import threading
import traceback

import torch
from f2_parts import Head, compiled_scorer

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch = compiled_scorer()
    requests, results = queue.Queue(), queue.Queue()

    def worker():
        while (item := requests.get()) is not None:
            i, kind = item
            try:
                if kind == "export":
                    for _ in range(200):
                        torch.fx.symbolic_trace(Head())
                else:
                    for _ in range(50):
                        model(batch)
                results.put((i, None, None))
            except Exception:
                results.put((i, threading.current_thread().name, traceback.format_exc()))

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(3)]
    for w in workers:
        w.start()
    kinds = ["export"] + ["score"] * 60
    for i, kind in enumerate(kinds):
        requests.put((i, kind))
    for _ in workers:
        requests.put(None)
    failed = 0
    for _ in kinds:
        i, name, text = results.get(timeout=60)
        if text is not None:
            failed += 1
            if failed == 1:
                print(f"request {i} failed in thread {name}:\n{text}", file=sys.stderr, end="")
    print(f"{failed} of {len(kinds)} requests failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
