"""r18_is_compiling_leak_adam: another thread's compile changes eager Adam's numbers.

Symptom: no error; eager `torch.optim.Adam(foreach=False)` steps in one thread are not bitwise
  equal to the same steps computed before (max abs diff up to ~4e-7) while another thread is
  compiling: a silent, tiny, non-deterministic change in training numerics.
Mechanism: `torch.compiler._is_compiling_flag` is a process global that Dynamo sets for the
  whole compile session (convert_frame `_compile_session_context`); the single-tensor Adam path
  calls `_get_value(step_t)`, which returns the float32 step tensor instead of a Python float when
  `is_compiling()` is True, so the bias corrections are computed in float32 (R8;
  single-thread control: forcing the flag gives exactly the same 4.02e-07).
Trigger: thread `repro-compiler` compiles --k fresh functions (backend --backend) while thread
  `repro-optimizer` repeats --steps eager Adam steps and compares bitwise with a reference made
  before the compiler started. First measured on 2.13 CPU: 20/20 runs, ~98 % of iterations.
Affected versions: 2.13.0 CPU (observed); any version whose _get_value reads is_compiling().
Fix: global-lock (the optimizer steps and the compiles under one lock).
Upstream: none found for this leak; related: PR #196637 (process-global eval-frame flags), #118390.
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup


def adam_run(torch, steps):
    """--steps eager Adam steps on a fixed problem; returns the final parameters."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, generator=g).requires_grad_()
    target = torch.randn(64, generator=g)
    opt = torch.optim.Adam([w], lr=1e-2, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        ((w - target) ** 2).sum().backward()
        opt.step()
    return w.detach().clone()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=4, help="fresh functions compiled by the other thread")
    p.add_argument("--steps", type=int, default=5, help="Adam steps per comparison")
    p.add_argument("--backend", default="aot_eager", choices=("eager", "aot_eager", "inductor"))
    args, fs = setup(p)
    import torch

    reference = adam_run(torch, args.steps)  # single-threaded, before any compile
    stop, diffs, counts = threading.Event(), [], {"runs": 0}

    def optimizer():
        fs.thread_start("optimizer")
        while not stop.is_set():
            with fs.around_call():
                w = adam_run(torch, args.steps)
            counts["runs"] += 1
            if not torch.equal(w, reference):
                diffs.append((w - reference).abs().max().item())
            beat()

    def compiler():
        fs.thread_start("compiler")
        try:
            for i in range(args.k):
                ns = {}  # a fresh code object per function: each one really compiles
                exec(f"def f{i}(x):\n    return torch.cos(x) * {i + 1} + x.sum()", {"torch": torch}, ns)
                with fs.around_call():
                    torch.compile(ns[f"f{i}"], backend=args.backend)(torch.randn(4, 8))
        finally:
            stop.set()

    errors = run_threads({"repro-optimizer": optimizer, "repro-compiler": compiler}, deadline_s=180)
    if errors:
        return 1
    if diffs:
        print(
            f"WRONG_RESULT: eager Adam not bitwise equal to its reference in {len(diffs)}/{counts['runs']} "
            f"runs while another thread compiled (max abs diff {max(diffs):.3g})"
        )
        return 1
    print(f"NOT REPRODUCED (bitwise equal in {counts['runs']}/{counts['runs']} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
