"""ThreadPoolExecutor jobs whose futures are never read: F2 exceptions are silently lost, exit 0.

User program: an offline embedding job. The main thread submits 40 batch-embedding jobs to a
ThreadPoolExecutor (3 workers) running a torch.compile'd encoder (backend="eager", warmed up
first), plus one job that exports a "debug graph" of the pooling module with
torch.fx.symbolic_trace a few hundred times. It keeps the futures in a list but never calls
.result() or .exception(); it shuts the pool down and reports how many embeddings were written.
What should happen: F2 in the pool, invisible. While the export job is inside Tracer.trace,
FX's process-global is-tracing flag is set and a batch job's compiled call raises `RuntimeError:
Detected that you are using FX to symbolically trace a dynamo-optimized function`. The
exception is stored in the job's Future and never retrieved: concurrent.futures prints nothing,
threading.excepthook never runs (the pool's worker catches it), the process exits 0. The only
trace is `wrote N of 40 embeddings` with N < 40. The harness's bootstrap records a Future's
exception that was never read by exit as a thread's uncaught one, so the verdict is CRASH / F2.
"""

import concurrent.futures
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)


class MeanPool(nn.Module):
    def forward(self, h):
        return h.mean(dim=1)


def main():
    w = torch.randn(32, 16)

    def encode(x):
        return torch.nn.functional.gelu(x @ w).mean(dim=1)

    encoder = torch.compile(encode, backend="eager")
    encoder(torch.randn(2, 8, 32))
    written = {}

    def embed_batch(i):
        for _ in range(200):
            out = encoder(torch.randn(2, 8, 32))
        written[i] = out

    def export_debug_graph():
        for _ in range(300):
            torch.fx.symbolic_trace(MeanPool())

    print("embedding 40 batches", flush=True)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=3, thread_name_prefix="embed")
    futures = [pool.submit(export_debug_graph)]
    futures += [pool.submit(embed_batch, i) for i in range(40)]
    pool.shutdown(wait=True)  # waits for the jobs; never looks at their outcome
    print(f"wrote {len(written)} of 40 embeddings", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
