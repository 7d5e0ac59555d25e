"""r09_per_thread_state_recompile: a compiled function recompiles because a thread's state differs.

Symptom: no error; a function compiled and warmed up in the main thread compiles AGAIN when a
  worker thread calls it (`GuardManager check failed reason: 'GLOBAL_STATE changed: num_threads'`,
  vllm-project/vllm#27286; or grad mode), each such graph counting against the shared
  recompile_limit -- extra compile time in the middle of a run.
Mechanism: Dynamo's GLOBAL_STATE guard includes values that are per-thread or that another
  thread changed: `torch.set_num_threads()` called in one thread is seen by threads started
  later but not by the main thread; grad mode is per thread (F5, #111569).
Trigger: --state num_threads (default): a setter thread calls `torch.set_num_threads(n + 1)`,
  then a fresh worker calls the compiled function. --state grad: a worker calls it under
  `torch.no_grad()`. Deterministic (H200 probe on 2.11: 1 -> 2 -> 3 compiles).
Affected versions: 2.10+ for num_threads in the guard (vllm#27286), grad mode all 2.x; 2.13.0 CPU.
Fix: none in harness.runtime.fixes -- keep per-thread state uniform (no set_num_threads in workers, the
  same grad mode per compiled function); expected to reproduce with every --fix.
Upstream: vllm-project/vllm#27286, #167463, #167416, #111569.
"""

import argparse
import contextlib
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", choices=("num_threads", "grad"), default="num_threads")
    args, fs = setup(p)
    import torch

    compiles, lock = [], threading.Lock()

    def counting_backend(gm, example_inputs):
        with lock:
            compiles.append(threading.current_thread().name)
        return gm.forward

    def f(x):
        return torch.sin(x) * 2 + x.cos()

    cf = torch.compile(f, backend=counting_backend)
    x = torch.randn(4, 8)
    fs.thread_start("main")
    with fs.around_call():
        cf(x)  # warm up in the main thread: one graph
    seen = {"main": (torch.get_num_threads(), torch.is_grad_enabled())}

    def setter():
        torch.set_num_threads(torch.get_num_threads() + 1)  # a typical per-worker init

    def worker():
        fs.thread_start("worker")
        grad = contextlib.nullcontext() if args.state == "num_threads" else torch.no_grad()
        with grad, fs.around_call():
            seen["worker"] = (torch.get_num_threads(), torch.is_grad_enabled())
            out = cf(x)
        if not torch.allclose(out, f(x)):
            raise AssertionError("compiled result differs from eager")
        beat()

    if args.state == "num_threads" and run_threads({"repro-setter": setter}, deadline_s=60):
        return 1
    if run_threads({"repro-worker": worker}, deadline_s=120):
        return 1
    state = f"(num_threads, grad) main={seen['main']} worker={seen['worker']}"
    if len(compiles) > 1:
        print(
            f"WRONG_RESULT: per-thread state recompile: {len(compiles)} compiles of one function "
            f"warmed up in main; {state}"
        )
        return 1
    print(f"NOT REPRODUCED (compiles: {len(compiles)}; {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
