"""Clean: threads compile and call under one user-level lock, an exporter traces under it too.

User program: a multi-model server written defensively. One `torch_lock = threading.Lock()`
guards everything torch.compile- or FX-related: four worker threads each compile their own
function (backend="aot_eager") and then call it, a shared compiled function is called by all of
them, and an exporter thread runs torch.fx.symbolic_trace, every one of these inside
`with torch_lock:`. The shared function is warmed up in the main thread before the workers start.
Results are checked against eager; the program prints `all N results match` and exits 0.
What should happen: no failure and no race. Every compile, compiled call and trace is
serialised by the lock, so FX's process-global flag and patcher (F2, F3, R4) are never seen by
another thread, the shared function is compiled once (no F10), and reset() is never called (no
R5). Expected classification: OK, no known race (a control for false positives: the harness
should find nothing).
"""

import sys
import threading
import time

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Exported(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


def main():
    torch_lock = threading.Lock()
    w = torch.randn(8, 8)

    def shared(x):
        return torch.sin(x @ w) + 1

    shared_c = torch.compile(shared, backend="aot_eager")
    shared_c(torch.randn(4, 8))
    mismatches, checked = [], [0]
    stop = threading.Event()

    def worker(i):
        scale = float(i + 1)

        def own(x):
            return torch.tanh(x * scale).cumsum(-1)

        with torch_lock:
            own_c = torch.compile(own, backend="aot_eager")
            own_c(torch.randn(4, 8))
        for _ in range(300):
            x = torch.randn(4, 8)
            with torch_lock:
                a, b = own_c(x), shared_c(x)
            if not (torch.allclose(a, own(x), atol=1e-6) and torch.allclose(b, shared(x), atol=1e-6)):
                mismatches.append(i)
            checked[0] += 1

    def exporter():
        m = Exported()
        while not stop.is_set():
            with torch_lock:
                torch.fx.symbolic_trace(m)
            time.sleep(0.002)  # outside the lock: a Lock is not fair, the workers need their turns

    exp = threading.Thread(target=exporter, name="exporter")
    workers = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(4)]
    exp.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    exp.join()
    if mismatches:
        print(f"{len(mismatches)} mismatches", file=sys.stderr)
        return 1
    print(f"all {checked[0]} results match", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
