"""Dynamo is not thread safe: a dynamic=False compile in one thread loses its config patch to another.

Source: pytorch/pytorch#118260 ("Dynamo is not thread safe", 2024)
https://github.com/pytorch/pytorch/issues/118260

What the reporter saw (ezyang, torch main of 2024-01, CPU tensors): two threads call one
`torch.compile(backend="eager", dynamic=False)` function with a new input size each call. "The
expected result is to compile N times. However, we eventually lose the race and forget that
automatic dynamic is supposed to be turned off": the symbolic_shapes log shows a compile that
made the size symbolic (a dynamic graph) although dynamic=False was asked for.

Adaptation:
- The backend "eager" is wrapped in a function that records, per compiled graph, whether any
  input size is symbolic (a torch.SymInt), which is what the reporter read off the
  `create_env`/`produce_guards` log lines; after the joins it prints the graph count and the
  number of graphs that came out dynamic. Nothing else changes: the reporter's threads, sizes
  (i * 2 + offset, 20 calls each) and prints are kept, and the program exits 0 as theirs did.
"""
import torch
import threading

dynamic_graphs = []
graphs = []


def eager_recording(gm, example_inputs):
    sym = any(
        isinstance(s, torch.SymInt)
        for t in example_inputs
        if isinstance(t, torch.Tensor)
        for s in t.shape
    )
    graphs.append(sym)
    if sym:
        dynamic_graphs.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
    return gm.forward


@torch.compile(backend=eager_recording, dynamic=False)
def f(x):
    return x * x

def run(offset):
    for i in range(20):
        print(f(torch.randn(i * 2 + offset)))

t1 = threading.Thread(target=run, args=[0])
t2 = threading.Thread(target=run, args=[1])

t1.start()
t2.start()

t1.join()
t2.join()

print(f"graphs compiled: {len(graphs)}; graphs with symbolic sizes despite dynamic=False: {len(dynamic_graphs)}")
if dynamic_graphs:
    print(f"dynamic=False lost: symbolic shapes {dynamic_graphs[0]}")
