"""The main thread waits on a threading.Event that the warm-up thread never sets (off-by-one).

User program: a server that warms up its torch.compile'd model (backend="eager") in a background
thread over a list of bucket shapes and only starts accepting requests after
`ready.wait()` (no timeout). The warm-up sets the event when it reaches "the last bucket", but
compares the loop index with len(buckets) instead of len(buckets) - 1, so the event is never set;
the warm-up thread finishes normally and silently.
What should happen: a hang in the user's own code, no error printed, no torch race: after
`warming up...` nothing more is printed, the main thread blocks in Event.wait() forever and the
CPU goes idle once the warm-up thread has exited. Expected classification: HANG, no catalogued
race (the generic `hang`).
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def main():
    w = torch.randn(64, 64)

    def forward(x):
        return torch.relu(x @ w).sum(-1)

    model = torch.compile(forward, backend="eager", dynamic=False)
    buckets = [1, 2, 4, 8]
    ready = threading.Event()

    def warm_up():
        for i, b in enumerate(buckets):
            model(torch.randn(b, 64))
            if i == len(buckets):  # BUG: never true; meant len(buckets) - 1
                ready.set()

    print("warming up...", flush=True)
    threading.Thread(target=warm_up, name="warm-up").start()
    ready.wait()  # no timeout
    print("accepting requests", flush=True)
    for _ in range(100):
        model(torch.randn(4, 64))
    return 0


if __name__ == "__main__":
    sys.exit(main())
