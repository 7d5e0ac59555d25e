"""A silent, CPU-bound compiled training loop that runs past a short deadline: busy, not hung.

User program: a hyper-parameter sweep trial. Two threads each train their own small MLP with a
shared torch.compile'd loss (backend="eager", compiled and warmed once in the main thread), for
a fixed time budget of 25 s (a "train for N seconds" trial), printing nothing until the end; the
main thread joins them and prints both final losses.
What should happen: no failure, no race; the program is simply slower than the deadline its
entry gives it (timeout = 12 s). The CPU is busy the whole time (both cores), the output silent,
so a run killed at the deadline must be called TIMEOUT (busy past its deadline), not HANG.
Given 60 s it exits 0 after ~29 s here.
Expected classification: TIMEOUT (under the entry's 12 s deadline).
"""

import sys
import threading
import time

import torch

torch.set_num_threads(1)
BUDGET_S = 25.0


def main():
    losses = {}

    def mse(p, y):
        return ((p - y) ** 2).mean()

    loss_fn = torch.compile(mse, backend="eager")
    loss_fn(torch.randn(512, 1), torch.randn(512, 1))  # compiled once, before the trials

    def trial(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(512, 64), torch.randn(512, 1)
        end = time.monotonic() + BUDGET_S
        while time.monotonic() < end:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses[seed] = loss.item()

    threads = [threading.Thread(target=trial, args=(s,), name=f"trial-{s}") for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed, loss in sorted(losses.items()):
        print(f"trial {seed}: final loss {loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
