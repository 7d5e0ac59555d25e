"""GPU: a training loop whose compiled forward runs in one thread and loss.backward() in another.

User program: a trainer split in two threads so that the optimizer work can be moved off the
forward path later: a "forward" thread runs the torch.compile(mode="reduce-overhead") model and
the loss, hands the loss to a "backward" thread through a queue, and waits for its `done` before
the next step; the backward thread calls loss.backward(), optimizer.step() and zero_grad(). The
forward thread waits with a timeout and stops with RuntimeError("backward thread died") if its
partner is gone. Exceptions are uncaught; the main thread joins both and exits 0. 30 steps of an
MLP on random data. Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA, torch 2.11): F1 via backward. The forward thread's first call compiles
and imports torch._inductor.cudagraph_trees, so its own tree manager exists; the backward graph
runs on the autograd engine's CUDA device thread, which copies the C++ TLS stash of the thread
that called backward(): the backward thread never had one, and the backward graph's cudagraph
wrapper fails with a bare `AssertionError` at `assert torch._C._is_key_in_tls(attr_name)`
(cudagraph_trees get_obj), raised by loss.backward() in the backward thread; the forward thread
then stops with `backward thread died`. cstash-tls-init, the fix diagnose offers for F1's
backward face (r02), gives the backward thread a stash of its own and is expected to hold.
Expected classification: CRASH (thread exceptions at exit 0), race F1.
"""

import queue
import sys
import threading

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

STEPS = 30


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, done = queue.Queue(), queue.Queue()
    history = []

    def backward_loop():
        while (loss := losses.get()) is not None:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done.put(True)

    def forward_loop(partner):
        for _ in range(STEPS):
            x, y = torch.randn(64, 128, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
            loss = nn.functional.cross_entropy(compiled(x), y)
            history.append(loss.item())
            losses.put(loss)
            while True:
                try:
                    done.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not partner.is_alive():
                        raise RuntimeError("backward thread died") from None
        losses.put(None)

    bwd = threading.Thread(target=backward_loop, name="backward")
    fwd = threading.Thread(target=forward_loop, args=(bwd,), name="forward")
    print(f"training {STEPS} steps: forward and backward in two threads", flush=True)
    bwd.start()
    fwd.start()
    fwd.join()
    losses.put(None)  # lets the backward thread end if the forward thread stopped early
    bwd.join()
    print(f"{len(history)} of {STEPS} steps, losses {history[:1]} ... {history[-1:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
