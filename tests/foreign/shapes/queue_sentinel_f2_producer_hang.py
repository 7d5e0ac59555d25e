"""A producer thread dies of F2 before sending the end sentinel; the consumer waits forever: a race-caused hang.

User program: a streaming featurizer. A "producer" thread runs a torch.compile'd featurizer
(backend="eager", warmed up) over 2000 chunks and puts each result on a queue.Queue, then a None
sentinel; a "writer" thread consumes with `queue.get()` (no timeout) until the sentinel. At the
same time a "schema" thread derives the output schema for 300 feature configurations by
FX-tracing a small module (torch.fx.symbolic_trace), then ends. Nothing is caught. The main
thread prints `streaming...` and joins the writer.
What should happen: F2, then a hang. The schema thread's trace sets FX's process-global
is-tracing flag; the producer's compiled call raises `RuntimeError: Detected that you are using
FX to symbolically trace a dynamo-optimized function`; threading.excepthook prints `Exception in
thread producer:`; the sentinel is never sent. Once the schema thread has finished its 300
traces (a second or two), the writer is blocked in queue.get() and the main thread in join(),
forever, the CPU idle and the output silent.
Expected classification: HANG, with the printed F2 traceback as the cause (race F2).
"""

import queue
import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Schema(nn.Module):
    def forward(self, x):
        return torch.stack([x.min(-1).values, x.max(-1).values], dim=-1)


def main():
    w = torch.randn(32, 32)

    def featurize(x):
        return torch.nn.functional.layer_norm(x @ w, (32,))

    feat = torch.compile(featurize, backend="eager")
    feat(torch.randn(4, 32))
    q = queue.Queue(maxsize=16)
    written = []

    def producer():
        for _ in range(2000):
            q.put(feat(torch.randn(4, 32)))
        q.put(None)

    def writer():
        while (item := q.get()) is not None:
            written.append(float(item.mean()))

    def schema():
        m = Schema()
        for _ in range(300):
            torch.fx.symbolic_trace(m)

    print("streaming...", flush=True)
    sch = threading.Thread(target=schema, name="schema")
    sch.start()
    threading.Thread(target=producer, name="producer").start()
    wr = threading.Thread(target=writer, name="writer")
    wr.start()
    wr.join()
    sch.join()
    print(f"wrote {len(written)} chunks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
