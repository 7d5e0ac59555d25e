"""Queue-fed serving workers hit FX's global tracing flag; excepthook prints, the process exits 0.

User program: a request server. A dispatcher (the main thread) puts requests on a queue.Queue;
three worker threads take them and run a torch.compile'd scoring function (backend="eager",
warmed up before serving); a background "graph snapshot" thread re-exports a small post-processing
module with torch.fx.symbolic_trace every few milliseconds. Workers catch nothing.
What should happen: F2. The snapshot thread's Tracer.trace sets FX's process-global
is-tracing flag (torch.fx._symbolic_trace._is_fx_tracing_flag) for the whole trace; a worker's
compiled call finds it set and raises `RuntimeError: Detected that you are using FX to
symbolically trace a dynamo-optimized function` in torch/_dynamo/eval_frame.py compile_wrapper.
threading.excepthook prints `Exception in thread worker-N:` and the traceback; the worker dies.
The compiled callable is a plain function, so no nn.Module.__call__ is on the workers' path and
R4 cannot show. The dispatcher joins its workers (dead or alive), prints a summary and exits 0.
Expected classification: CRASH (thread exceptions at exit 0), race F2.
"""

import queue
import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)


class PostProcess(nn.Module):
    def forward(self, logits):
        return torch.topk(torch.log_softmax(logits, dim=-1), k=2, dim=-1).values


def make_scorer():
    w = torch.randn(16, 8)
    b = torch.zeros(8)

    def score(x):
        return torch.tanh(x @ w + b).sum(dim=-1)

    return torch.compile(score, backend="eager")


def main():
    scorer = make_scorer()
    scorer(torch.randn(4, 16))  # warm-up compile
    requests = queue.Queue(maxsize=64)
    done = []
    stop = threading.Event()

    def snapshot_loop():
        post = PostProcess()
        while not stop.is_set():
            torch.fx.symbolic_trace(post)

    def worker():
        while (req := requests.get()) is not None:
            rid, batch = req
            done.append((rid, scorer(batch)))

    print("serving on 3 workers", flush=True)
    snap = threading.Thread(target=snapshot_loop, name="graph-snapshot", daemon=True)
    snap.start()
    workers = [threading.Thread(target=worker, name=f"worker-{i}", daemon=True) for i in range(3)]
    for w in workers:
        w.start()
    for rid in range(4000):
        if not any(w.is_alive() for w in workers):
            break  # the dispatcher stops feeding once every worker is gone
        try:
            requests.put((rid, torch.randn(4, 16)), timeout=1.0)
        except queue.Full:
            continue
    for _ in workers:
        try:
            requests.put_nowait(None)
        except queue.Full:
            pass
    for w in workers:
        w.join(timeout=5)
    stop.set()
    print(f"dispatched, {len(done)} responses", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
