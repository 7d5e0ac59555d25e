"""A torch.compile(dynamic=True) model shared by several threads raises the FX-tracing error.

Source: pytorch/pytorch#126024 ("Can not use torch.compile with dynamic=Ture when using
multi-threads", 2024) https://github.com/pytorch/pytorch/issues/126024

What the reporter saw (CaoE, torch 2.4.0.dev20240417+cpu, CPU): running one compiled model in
several threads,
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function. This is not supported at the moment.`
The issue gives the structure only:

    model = torch.compile(model, dynamic=True)
    thread = threading.Thread(target=run_sharing_model, args=(model, dataloader, ...))

Adaptation (the issue has no full script; the rest is filled in as small as possible):
- model: Linear(64, 128) -> ReLU -> Linear(128, 10) in eval mode under torch.no_grad();
- dataloader: a list of 8 batches whose batch sizes vary (1..8), the same list for every thread;
- 4 threads run `run_sharing_model(model, dataloader, n_iters)`, 3 passes over the batches each;
- the threads are joined with a 120 s deadline; an exception in a thread is printed by Python's
  thread excepthook and the program exits 0, as a plain threading.Thread program does.
"""
import threading

import torch


def run_sharing_model(model, dataloader, n_iters):
    with torch.no_grad():
        for _ in range(n_iters):
            for x in dataloader:
                model(x)


model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
).eval()
model = torch.compile(model, dynamic=True)
dataloader = [torch.randn(bs, 64) for bs in (1, 2, 3, 4, 5, 6, 7, 8)]

threads = []
for _ in range(4):
    thread = threading.Thread(target=run_sharing_model, args=(model, dataloader, 3))
    threads.append(thread)
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(timeout=120)
print("done")
