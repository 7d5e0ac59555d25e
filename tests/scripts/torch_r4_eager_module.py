"""R4: plain eager nn.Module calls fail while another thread runs torch.fx.symbolic_trace.

The tracer patches nn.Module.__call__ on the class (process-wide), so the eager thread's module
call enters the tracer's call_module -> path_of_module -> NameError "module is not installed as
a submodule" (fixed upstream by pytorch/pytorch PR #187589). The eager
thread's exception reaches threading.excepthook ("Exception in thread eager-0:"); exit 1.
"""

import os
import sys
import threading

import torch
import torch.nn as nn

CALLS = 6000


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def trace_forever(stop: threading.Event) -> None:
    model = Small()
    while not stop.is_set():
        torch.fx.symbolic_trace(model)


def call_eagerly(failed: list) -> None:
    model, x = Small(), torch.randn(4, 8)
    try:
        for _ in range(CALLS):
            model(x)
    except BaseException:
        failed.append(True)
        raise


def main() -> int:
    torch.set_num_threads(1)
    print(f"pid={os.getpid()}", flush=True)
    stop, failed = threading.Event(), []
    tracer = threading.Thread(target=trace_forever, args=(stop,), name="tracer-0")
    eager = threading.Thread(target=call_eagerly, args=(failed,), name="eager-0")
    tracer.start()
    eager.start()
    eager.join(timeout=120)
    stop.set()
    tracer.join(timeout=30)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
