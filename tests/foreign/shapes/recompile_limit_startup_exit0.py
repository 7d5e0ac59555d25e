"""Sixteen workers make their first call of one compiled model together: recompile limit, exit 0.

User program: a thread-per-connection inference server. At start-up it creates one shared
torch.compile'd model function (backend="aot_eager") and NOT warmed up ("the first request will
compile it"), starts 16 worker threads that wait on a threading.Barrier (the listener opening),
and each serves 20 requests of the same shape. Nothing fails; the program prints
`16 workers served 320 requests` and exits 0.
What should happen: F10, silently. Every worker that finds no cache entry compiles the frame
again and adds another cache entry to the same code object (duplicate compiles); after
config.recompile_limit (8) entries Dynamo gives up on the frame and the remaining workers run
the function eagerly. Each of those workers logs a `W... torch/_dynamo/convert_frame.py ...]
[0/N] torch._dynamo hit config.recompile_limit (8)` warning block (N = 8..15: 8 blocks with 16
workers) naming `last reason: 0/7: Unexpected recompilation: runtime guards failed even though
they passed during recompilation-reason analysis`. No exception, exit 0: the finding is the
warning (duplicate compiles, a compiled path silently lost for some threads).
Expected classification: OK at exit 0 with an F10 warning (harness should surface F10 as a
finding, not a crash).
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def main():
    w1, w2 = torch.randn(32, 64), torch.randn(64, 8)

    def model(x):
        return torch.softmax(torch.nn.functional.gelu(x @ w1) @ w2, dim=-1)

    compiled = torch.compile(model, backend="aot_eager")
    gate = threading.Barrier(16)
    served = []

    def worker(i):
        gate.wait()
        for _ in range(20):
            out = compiled(torch.randn(4, 32))
            served.append(out.shape[0])

    threads = [threading.Thread(target=worker, args=(i,), name=f"conn-{i}") for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"16 workers served {len(served)} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
