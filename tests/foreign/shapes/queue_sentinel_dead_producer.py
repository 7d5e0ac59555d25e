"""A producer thread dies before sending the end sentinel; the consumer waits on queue.get() forever.

User program: a preprocessing pipeline. A "producer" thread tokenizes/embeds batches with a
torch.compile'd embedding function (backend="eager") and puts them on a queue.Queue, then a
None sentinel; a "consumer" thread takes batches with `queue.get()` (no timeout) until the
sentinel. Batch 37 of the synthetic data set has a wrong feature width (a data bug), so the
compiled call recompiles for the new shape and Dynamo raises `torch._dynamo.exc.TorchRuntimeError:
RuntimeError when making fake tensor call` (`a and b must have same reduction dim, but got
[8, s27] X [32, 16]`, after an `E... fake_tensor.py ... failed while attempting to run meta for
aten.mm.default` log block) in the producer; the producer does not catch it,
threading.excepthook prints `Exception in thread producer:`, and the sentinel is never sent.
The main thread prints `pipeline started` and joins the consumer.
What should happen: a hang after a deterministic error, no torch race: the same batch fails every
run (a shape bug, not a race), then the consumer blocks in queue.get() and the main thread in
join(), CPU idle. Expected classification: HANG (a traceback was printed, but the run's end is a
hang); races none (the printed error is deterministic, not a catalogued race).
"""

import queue
import sys
import threading

import torch

torch.set_num_threads(1)


def batches():
    g = torch.Generator().manual_seed(0)
    for i in range(100):
        width = 31 if i == 37 else 32  # the data bug
        yield torch.randn(8, width, generator=g)


def main():
    w = torch.randn(32, 16)

    def embed(x):
        return torch.nn.functional.normalize(x @ w, dim=-1)

    embed_c = torch.compile(embed, backend="eager")
    q = queue.Queue(maxsize=8)
    consumed = []

    def producer():
        for b in batches():
            q.put(embed_c(b))
        q.put(None)  # never reached when a batch fails

    def consumer():
        while True:
            item = q.get()  # no timeout
            if item is None:
                break
            consumed.append(float(item.sum()))

    print("pipeline started", flush=True)
    threads = [threading.Thread(target=producer, name="producer"), threading.Thread(target=consumer, name="consumer")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"consumed {len(consumed)} batches", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
