"""F2: a thread that only *calls* a compiled function fails while another thread FX-traces.

`torch.fx._symbolic_trace._is_fx_tracing_flag` is a process-wide global set by Tracer.trace; the
compiled function's wrapper checks it and raises "Detected that you are using FX to symbolically
trace a dynamo-optimized function" (pytorch/pytorch#126024; the tracer sleeps inside the traced
function to hold the flag). The failure is reported in the
trainer's format (`=== thread <name> failed: ... ===` + traceback); exit 1.
"""

import os
import sys
import threading
import time

import torch
from thread_report import report

TRACE_SLEEP_S = 0.5
CALL_FOR_S = 5.0


def slow(x: torch.Tensor) -> torch.Tensor:
    time.sleep(TRACE_SLEEP_S)  # runs under the tracer: the flag stays set
    return x + 1


def double(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


def trace_repeatedly(stop: threading.Event) -> None:
    while not stop.is_set():
        torch.fx.symbolic_trace(slow)


def call_compiled(compiled, failures: list) -> None:
    x, deadline = torch.randn(4), time.monotonic() + CALL_FOR_S
    try:
        while time.monotonic() < deadline:
            compiled(x)
    except Exception as exc:
        failures.append((threading.current_thread().name, exc))


def main() -> int:
    torch.set_num_threads(1)
    print(f"pid={os.getpid()}", flush=True)
    compiled = torch.compile(double, backend="eager")
    compiled(torch.randn(4))  # compiled before the tracer starts
    stop, failures = threading.Event(), []
    tracer = threading.Thread(target=trace_repeatedly, args=(stop,), name="tracer-0")
    caller = threading.Thread(target=call_compiled, args=(compiled, failures), name="caller-0")
    tracer.start()
    caller.start()
    caller.join(timeout=60)
    stop.set()
    tracer.join(timeout=30)
    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
