"""r20_flex_backward_compile_deadlock: lazy backward compile vs a flex_attention trace -> deadlock.

Symptom: the process hangs with no error. py-spy shows the CUDA autograd device thread (no
  Python name, "?") waiting for a lock in `compile_fx_backward`, one thread inside Dynamo's
  trace of `flex_attention` blocked in `torch.autograd.grad` (`ReadyQueue::pop`) under
  `create_fw_bw_graph`, and the backward caller waiting in `Tensor.backward`.
Mechanism: a compiled function whose backward is compiled lazily (static shapes save no SymInts
  for backward; F8) compiles it on the autograd device thread, which takes Dynamo's
  `compile_lock` in `compile_fx_backward`. Another thread holds that lock while Dynamo traces
  `flex_attention`; the HOP builds its joint graph with `torch.autograd.grad` on fake CUDA
  tensors, whose work the engine queues to the same device thread. Each waits for the other.
Trigger: thread repro-trace calls a compiled function with a long prefix (--prefix-ops
  elementwise ops, so its trace holds compile_lock for a while) and then flex_attention on CUDA
  tensors that require grad; thread repro-bwd has run the forward of another compiled function
  and calls backward --delay seconds after repro-trace started. Seen 1/1 in the DFlash trainer
  on an H200 (torch 2.11, 3 drafter threads, compile.dynamic=false; results/gpu-diag,
  docs/log/2026-11-29-dflash-trainer-on-h200.md); this script through the runner: 5/10 plain
  (results/gpu-repros).
Affected versions: 2.11 (trainer run); any version whose compile_fx_backward takes compile_lock.
Fix: single-thread-autograd (both threads run their autograd work on themselves) or global-lock
  (the trace and the backward never overlap).
Upstream: lazy backward compilation #104971, #141790 (F8).
"""

import argparse
import sys
import threading
import time

from _common import beat, run_threads, setup


def need_cuda(torch):
    if not torch.cuda.is_available():
        print("SKIP: needs CUDA")
        sys.exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix-ops", type=int, default=400, help="elementwise ops traced before flex")
    p.add_argument("--delay", type=float, default=0.3, help="seconds from the trace start to backward")
    p.add_argument("--deadline", type=float, default=180.0, help="seconds before the threads count as hung")
    args, fs = setup(p)
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    need_cuda(torch)
    started = threading.Event()
    ready = threading.Event()

    def traced(q, k, v, n):
        x = q
        for i in range(n):  # unrolled by Dynamo: a long trace before flex_attention
            x = x * 1.0001 + 1e-6 * i
        return flex_attention(x, k, v).sum()

    def tracer():
        fs.thread_start("trace")
        q, k, v = (torch.randn(1, 2, 128, 64, device="cuda", requires_grad=True) for _ in range(3))
        fn = torch.compile(traced, dynamic=False)
        ready.wait(timeout=args.deadline)
        with fs.around_call():
            started.set()
            fn(q, k, v, args.prefix_ops).backward()
        beat()

    def backward_caller():
        fs.thread_start("bwd")
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).cuda()
        step = torch.compile(model, dynamic=False)
        x = torch.randn(32, 256, device="cuda")
        with fs.around_call():
            loss = step(x).square().mean()  # forward compiled now; backward compiled lazily
        ready.set()
        started.wait(timeout=args.deadline)
        time.sleep(args.delay)
        with fs.around_call():
            loss.backward()
        beat()

    errors = run_threads({"repro-trace": tracer, "repro-bwd": backward_caller}, deadline_s=args.deadline)
    torch.cuda.synchronize()
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED: both threads finished (prefix {args.prefix_ops} ops, delay {args.delay} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
