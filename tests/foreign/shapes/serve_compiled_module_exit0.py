"""Serving workers calling a compiled nn.Module die beside a background FX exporter; exit 0.

User program: a small inference server. Three worker threads take requests from a queue.Queue
and call `torch.compile(ScoringHead())` (an OptimizedModule, backend="eager", warmed up in the
main thread); a background "exporter" thread keeps re-exporting a fresh ScoringHead with
torch.fx.symbolic_trace (say, to refresh a serving snapshot). Nobody catches exceptions in the
workers.
What should happen: R4 in most runs, F2 in some, often both in one run. The compiled model is
an nn.Module, so a worker's call goes through nn.Module.__call__, which the exporter's
Tracer.trace has patched on the class, process-wide: `NameError: module is not installed as a
submodule` (R4, from torch/fx/_symbolic_trace.py path_of_module). A call that gets past the
patch reaches Dynamo's compile_wrapper while FX's process-global is-tracing flag is set:
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized
function` (F2). The three workers die at about the same moment, so threading.excepthook's
`Exception in thread worker-N:` tracebacks are printed interleaved, line fragments mixed. The
main thread joins its dead workers, prints `served N of 3000 requests` and exits 0.
Expected classification: CRASH (thread exceptions at exit 0), races R4 and F2.
"""

import queue
import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)


class ScoringHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 4)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


def main():
    head = ScoringHead().eval()
    model = torch.compile(head, backend="eager")
    with torch.no_grad():
        model(torch.randn(2, 16))  # warm-up compile before serving
    requests = queue.Queue()
    served = []
    stop_export = threading.Event()

    def exporter():
        snapshot = ScoringHead()
        while not stop_export.is_set():
            torch.fx.symbolic_trace(snapshot)  # "refresh the serving snapshot"

    def worker():
        while True:
            item = requests.get()
            if item is None:
                return
            rid, batch = item
            with torch.no_grad():
                out = model(batch)
            served.append((rid, float(out.sum())))

    print("serving...", flush=True)
    bg = threading.Thread(target=exporter, name="exporter", daemon=True)
    bg.start()
    workers = [threading.Thread(target=worker, name=f"worker-{i}") for i in range(3)]
    for w in workers:
        w.start()
    for rid in range(3000):
        requests.put((rid, torch.randn(2, 16)))
    for _ in workers:
        requests.put(None)
    for w in workers:
        w.join()
    stop_export.set()
    bg.join()
    print(f"served {len(served)} of 3000 requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
