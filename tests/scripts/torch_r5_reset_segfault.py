"""R5: torch._dynamo.reset() in one thread while another runs a compiled function: SIGSEGV.

reset() holds compile_lock, but cache lookup and guard evaluation in the calling thread do not
take it, so the C++ eval frame reads freed cache entries (on 2.13 CPU, 23/23 crashing runs showed
the caller in eval_frame.compile_wrapper). A 1 us switch interval widens the window.
faulthandler (enabled by the harness bootstrap or PYTHONFAULTHANDLER) prints the report.
"""

import faulthandler
import os
import sys
import threading
import time

import torch

RUN_FOR_S = 20.0


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w).sin() + 1.0


def reset_forever(stop: threading.Event) -> None:
    while not stop.is_set():
        torch._dynamo.reset()
        time.sleep(0.001)


def main() -> int:
    faulthandler.enable(all_threads=True)
    torch.set_num_threads(1)
    sys.setswitchinterval(1e-6)
    print(f"pid={os.getpid()}", flush=True)
    compiled, stop = torch.compile(f, backend="eager"), threading.Event()
    resetter = threading.Thread(target=reset_forever, args=(stop,), name="resetter-0")
    resetter.start()
    w, start = torch.randn(8, 8), time.monotonic()
    try:
        while time.monotonic() - start < RUN_FOR_S:
            compiled(torch.randn(4, 8), w)
    finally:
        stop.set()
        resetter.join(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
