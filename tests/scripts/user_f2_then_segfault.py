"""User program: a printed error followed by a segfault (F2 first, then R5).

A request thread's compiled call fails while an exporter thread runs torch.fx.symbolic_trace
(F2: FX's process-global tracing flag, pytorch/pytorch#126024); the handler logs it with
logging.exception and, to "recover", a housekeeping thread starts calling torch._dynamo.reset()
while requests continue, which crashes the process in `compile_wrapper` (R5, PRs
pytorch/pytorch#193697, #195355). The first failure is the logged F2; the crash is its aftermath.
Exits 1 if it survived with a logged failure.
"""

import faulthandler
import logging
import sys
import threading
import time

import torch
from f2_parts import Head, compiled_scorer

faulthandler.enable(all_threads=True)
sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch = compiled_scorer()
    exporting, failed = threading.Event(), threading.Event()
    exporting.set()

    def export():
        while exporting.is_set():
            torch.fx.symbolic_trace(Head())

    def housekeeping():
        failed.wait()
        while True:
            torch._dynamo.reset()
            time.sleep(0.001)

    threading.Thread(target=export, name="exporter", daemon=True).start()
    threading.Thread(target=housekeeping, name="housekeeping", daemon=True).start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            model(torch.randn(4, 8))
        except RuntimeError:
            if not failed.is_set():
                logging.exception("request failed; resetting compiled code")
                exporting.clear()
                failed.set()
    return 1 if failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
