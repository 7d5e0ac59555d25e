"""R5 workload for the scheduler: torch._dynamo.reset() in one thread while another runs compiled code.

Thread A calls one compiled function for SECS seconds; thread B loops `torch._dynamo.reset()` with a
1 ms sleep. `reset()` holds compile_lock, but the C++ cache lookup and guard evaluation in A do not
take it, so A can run on freed cache entries: SIGSEGV (sometimes SIGFPE) in compile_wrapper, or
`NameError: name '__compiled_fn_...'` (R6; first measured on 2.13 CPU with the eager backend:
default interval 1/20, 1e-6 interval 10/10). A crash kills the process (faulthandler prints both
stacks); a clean run exits 0. Stand-in for repro/r16_reset_segfault.py.
"""

import argparse
import sys
import threading
import time
import traceback

import torch


def f(x, w):
    return torch.relu(x @ w).sin() + 1.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--secs", type=float, default=8.0)
    ap.add_argument("--backend", default="eager")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cf = torch.compile(f, backend=args.backend)
    stop, errors = threading.Event(), []

    def resetter():
        while not stop.is_set():
            torch._dynamo.reset()
            time.sleep(0.001)

    b = threading.Thread(target=resetter, name="B")
    b.start()
    w, t0, calls = torch.randn(8, 8), time.monotonic(), 0
    try:
        while time.monotonic() - t0 < args.secs:
            cf(torch.randn(4, 8), w)
            calls += 1
    except Exception as e:  # R6: NameError for a removed __compiled_fn_ global
        errors.append(e)
        print(f"=== thread MainThread failed: {type(e).__name__}: {e} ===", file=sys.stderr)
        traceback.print_exc()
    finally:
        stop.set()
        b.join()
    print(f"calls={calls}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
