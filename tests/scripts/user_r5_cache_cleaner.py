"""User program: a housekeeping thread calls torch._dynamo.reset() to free compiled code while the
main thread keeps serving compiled calls (R5).

reset() takes compile_lock, but the calling thread's cache lookup and guard evaluation do not, so
the C++ eval frame reads freed cache entries: SIGSEGV (sometimes SIGFPE) in `compile_wrapper`
(PRs pytorch/pytorch#193697, #195355). faulthandler prints the crash
report. Runs at most RUN_FOR_S; exit 0 if it survived.
"""

import faulthandler
import sys
import threading
import time

import torch

RUN_FOR_S = 15.0
faulthandler.enable(all_threads=True)
sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def featurize(x, w):
    return torch.relu(x @ w).sin() + 1.0


class CacheCleaner(threading.Thread):
    def __init__(self):
        super().__init__(name="cache-cleaner", daemon=True)

    def run(self):
        while True:
            torch._dynamo.reset()
            time.sleep(0.001)


def main():
    model, w = torch.compile(featurize, backend="eager"), torch.randn(8, 8)
    CacheCleaner().start()
    start, served = time.monotonic(), 0
    while time.monotonic() - start < RUN_FOR_S:
        model(torch.randn(4, 8), w)
        served += 1
    print(f"served {served} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
