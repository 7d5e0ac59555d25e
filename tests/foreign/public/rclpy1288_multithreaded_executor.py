"""A compiled (CUDA graph) model called from ROS 2 MultiThreadedExecutor callbacks fails in the cudagraph recording.

Source: ros2/rclpy#1288 ("Bad interaction between `torch.compile` and `MultiThreadedExecutor`",
2024) https://github.com/ros2/rclpy/issues/1288

What the reporter saw (alberthli, ROS 2 Humble, torch 2.4-era, CUDA): a compiled model called in a
timer callback, with other callbacks in other (MutuallyExclusive) callback groups, run by a
`MultiThreadedExecutor`; `executor.spin()` raised from `torch/_inductor/cudagraph_trees.py`
`_record`: `RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling
cublasCreate(handle)` (an `addmm` of a (1, 100) input with a (100, 10) weight). Keeping
everything on CPU avoids the error (the reporter's EDIT). The same reporter's stack trace in
pytorch/pytorch#123177 ends in the cudagraph TLS assertion.

Adaptation:
- rclpy is not installable here; its `MultiThreadedExecutor` is emulated by a
  `ThreadPoolExecutor(max_workers=4)` that fires each callback group's timer every 10 ms, at most
  one callback per MutuallyExclusive group at a time (as rclpy does), on whichever pool thread is
  free; `spin()` re-raises a callback's exception in the main thread, as `executor.spin()` does;
- the issue's MWE was visible only up to `class MyModule(torch`: MyModule is Linear(100, 10)
  (the traceback's addmm shapes), compiled with mode="reduce-overhead" (the traceback's
  cudagraph_trees path); the other group's timer does a CUDA matmul; spin runs for 5 s;
- without CUDA the program prints `SKIP: needs CUDA` and exits 0 (the reporter's CPU path works).
"""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

torch.set_float32_matmul_precision("high")


class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(100, 10)

    def forward(self, x):
        return self.linear(x)


class MyNode:
    def __init__(self):
        self.model = torch.compile(MyModule().cuda(), mode="reduce-overhead")
        self.other = torch.randn(256, 256, device="cuda")
        # (callback group, period, callback)
        self.timers = [("model_group", 0.01, self.model_callback), ("other_group", 0.01, self.other_callback)]

    def model_callback(self):
        self.model(torch.randn(1, 100, device="cuda"))

    def other_callback(self):
        (self.other @ self.other).sum().item()


def spin(node, executor, seconds):
    running = {}
    next_due = {name: 0.0 for name, _, _ in node.timers}
    end = time.time() + seconds
    while time.time() < end:
        now = time.time()
        for name, period, cb in node.timers:
            fut = running.get(name)
            if fut is not None and fut.done():
                fut.result()  # executor.spin() raises the callback's exception
                running.pop(name)
                fut = None
            if fut is None and now >= next_due[name]:
                running[name] = executor.submit(cb)
                next_due[name] = now + period
        time.sleep(0.001)
    for fut in running.values():
        fut.result()


node = MyNode()
with ThreadPoolExecutor(max_workers=4) as executor:
    spin(node, executor, 5.0)
print("spun 5 s without an error")
