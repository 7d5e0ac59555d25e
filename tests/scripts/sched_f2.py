"""F2 workload for the scheduler: a compiled call fails while another thread runs fx.symbolic_trace.

Thread A compiles K fresh functions (new code objects, so each really compiles) and calls each
CALLS times; thread B runs `torch.fx.symbolic_trace` of a two-Linear module every PAUSE_MS. When A's
call lands while B's trace holds the process-global `_is_fx_tracing_flag`, compile_wrapper raises
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function`
(F2, its R1 face).
Exit 1 and print `REPRODUCED: F2 ...` when it reproduces, 0 otherwise. Stand-in for
repro/r06_fx_tracing_flag.py until that lands.
"""

import argparse
import sys
import threading
import traceback

import torch
import torch.nn as nn

F2_TEXT = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def fresh_fn(i: int):
    scope: dict = {"torch": torch}
    exec(f"def f{i}(x):\n    return torch.relu(x * {i + 1}.0).sin() + {i}.0\n", scope)
    return scope[f"f{i}"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--pause-ms", type=float, default=5.0, help="B sleeps this long between traces")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stop, errors = threading.Event(), []

    def tracer():
        m = Small()
        while not stop.is_set():
            torch.fx.symbolic_trace(m)
            # Occasional tracing (as in a real program) keeps the plain rate low: A mostly runs
            # while B sleeps, outside any trace, unless preemption lands inside one.
            stop.wait(args.pause_ms / 1000.0)

    def compiler():
        x = torch.randn(4, 8)
        for i in range(args.k):
            cf = torch.compile(fresh_fn(i), backend=args.backend)
            for _ in range(args.calls):
                cf(x)

    def guarded(fn):
        def body():
            try:
                fn()
            except BaseException as e:  # recorded and reported below, every thread
                errors.append((threading.current_thread().name, e, traceback.format_exc()))
            finally:
                if fn is compiler:
                    stop.set()

        return body

    threads = [threading.Thread(target=guarded(f), name=n) for f, n in ((tracer, "B"), (compiler, "A"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, e, tb in errors:
        print(f"=== thread {name} failed: {type(e).__name__}: {e} ===\n{tb}", file=sys.stderr)
    f2 = [e for _, e, _ in errors if F2_TEXT in str(e)]
    if f2:
        print(f"REPRODUCED: F2 RuntimeError in compile_wrapper ({len(f2)} thread(s))")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
