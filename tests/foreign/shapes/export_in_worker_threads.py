"""A model-packaging service: worker threads take (name, model) jobs off a queue and
torch.export each model for deployment, so that several exports run at once.

torch.export keeps its tracing state in module globals (the exported module's hierarchy, the
proxy mode's slot, the mode stack that export pushes and pops from Python): two exports at once
pop each other's modes. Each failed job is logged with its error; the service exits 1 if any job
failed. Alone (`--workers 1`) every job exports.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading

import torch


class Head(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.proj(x)))


def worker(jobs: queue.Queue, failures: list[str], lock: threading.Lock) -> None:
    while (job := jobs.get()) is not None:
        name, model, example = job
        try:
            torch.export.export(model, (example,))
        except Exception as e:  # the service logs a failed job and goes on
            first = str(e).splitlines()[0] if str(e) else ""
            with lock:
                failures.append(f"{name}: {type(e).__name__}: {first}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--jobs", type=int, default=24)
    a = p.parse_args()
    sys.setswitchinterval(1e-5)  # a busy host: threads switch often
    jobs: queue.Queue = queue.Queue()
    for k in range(a.jobs):
        jobs.put((f"head-{k}", Head(8 + k % 4), torch.randn(4, 8 + k % 4)))
    for _ in range(a.workers):
        jobs.put(None)
    failures: list[str] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(target=worker, args=(jobs, failures, lock), name=f"packager-{k}") for k in range(a.workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for line in failures:
        print(f"export failed: {line}", file=sys.stderr)
    print(f"exported {a.jobs - len(failures)} of {a.jobs} models with {a.workers} workers")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
