"""r15_eager_module_under_tracer: plain eager nn.Module calls fail while another thread traces.

Symptom: `NameError: module is not installed as a submodule` from an ordinary eager module call
  (torch/fx/_symbolic_trace.py module_call_wrapper -> call_module -> path_of_module), in a thread
  that never traces or compiles anything.
Mechanism: `Tracer.trace` patches `torch.nn.Module.__call__` / `__getattr__` on the class,
  process-wide, for the whole trace (`_new_patcher`); every other thread's module call goes
  through the tracing thread's `module_call_wrapper` (R4).
  A plain inductor compile does the same once per process (`_inductor/loop_body.py`
  `symbolic_trace(identity)`), which is how eager `checkpoint` in another thread was hit.
Trigger: thread `repro-tracer` loops `torch.fx.symbolic_trace(m)`; the main thread makes
  --iters plain eager calls of another instance. First measured on 2.13 CPU: 9/10 runs, 5/5 at
  a 1e-6 switch interval.
Affected versions: 2.11 (global patcher), 2.13.0 (CPU, observed); PR #187589 isolates patches.
Fix: global-lock (the trace and the eager calls under one lock; no registry fix is narrower).
Upstream: PR #187589 "Isolate FX tracing patches from unrelated threads", PR #168999, #126024.
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=6000, help="eager calls in the caller thread")
    args, fs = setup(p)
    import torch
    import torch.nn as nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    stop, failures = threading.Event(), []

    def tracer():
        fs.thread_start("tracer")
        m = Small()
        while not stop.is_set():
            with fs.around_call():
                torch.fx.symbolic_trace(m)

    def caller():
        fs.thread_start("caller")
        m, x = Small(), torch.randn(4, 8)
        try:
            for _ in range(args.iters):
                try:
                    with fs.around_call():
                        m(x)
                except NameError as exc:
                    failures.append((threading.current_thread().name, exc))
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-tracer": tracer, "repro-caller": caller}, deadline_s=120)
    if failures:
        name, first = failures[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed eager calls: {len(failures)}/{args.iters}")
        print(f"REPRODUCED: NameError: {first}")
        return 1
    if errors:
        return 1
    print(f"NOT REPRODUCED (failed eager calls: 0/{args.iters})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
