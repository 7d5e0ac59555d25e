"""torch.compile crashes with InternalTorchDynamoError when another thread mutates an OrderedDict argument.

Source: pytorch/pytorch#196208 ("torch.compile crashes with InternalTorchDynamoError when an
OrderedDict is mutated concurrently", 2026) https://github.com/pytorch/pytorch/issues/196208

What the reporter saw (sssssh1228, 2026-09, backend="eager"): while Dynamo builds the
VariableTracker for an OrderedDict argument (`all(ConstantVariable.is_literal(k) for k in
value.keys())` in VariableBuilder), another thread mutates it and Python raises
`RuntimeError: OrderedDict mutated during iteration`, surfaced as
`torch._dynamo.exc.InternalTorchDynamoError`; eager succeeds.

Adaptation (the issue's minimal reproducer was visible only up to `def fn(mapping, value):`;
the rest is rebuilt from its description and its imports, sys/threading/time):
- kept: the 512-item OrderedDict `state` plus `"anchor"`, `x = torch.tensor([1.0, 2.0])`,
  `fn(mapping, value)`, backend="eager";
- rebuilt: `fn` returns `value * mapping["anchor"]`; a mutator thread inserts and pops a key in
  a loop; `sys.setswitchinterval(1e-6)`; the main thread re-traces `fn` (torch._dynamo.reset()
  then a call) for up to 20 s or until the first exception, which it prints; the mutator is
  stopped and joined with a 5 s deadline; exit 1 on the crash, 0 otherwise.
"""
import sys
import threading
import time
import traceback
from collections import OrderedDict

import torch


state = OrderedDict((f"item_{i}", i) for i in range(512))
state["anchor"] = 3

x = torch.tensor([1.0, 2.0])


def fn(mapping, value):
    return value * mapping["anchor"]


stop = threading.Event()


def mutator():
    i = 0
    while not stop.is_set():
        state[f"tmp_{i}"] = i
        state.pop(f"tmp_{i}", None)
        i += 1


sys.setswitchinterval(1e-6)
compiled = torch.compile(fn, backend="eager")
t = threading.Thread(target=mutator, daemon=True)
t.start()
deadline = time.time() + 20
attempts = 0
failure = None
try:
    while time.time() < deadline:
        torch._dynamo.reset()
        attempts += 1
        try:
            compiled(state, x)
        except Exception as e:
            failure = e
            traceback.print_exc()
            break
finally:
    stop.set()
    t.join(timeout=5)
    sys.setswitchinterval(0.005)
print(f"traces attempted: {attempts}; crashed: {failure is not None}")
sys.exit(1 if failure is not None else 0)
