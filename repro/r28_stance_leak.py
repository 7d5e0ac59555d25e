"""r28_stance_leak: one thread's skip_guard_eval_unsafe stance gives another thread wrong results.

Symptom: no error; compiled calls in a thread that never changed the stance return the output of
  a cache entry whose guards do not hold for their arguments (`f(x, 2)` returns `x * 1`): a silent
  wrong result, while another thread runs inside
  `torch.compiler.set_stance(skip_guard_eval_unsafe=True)`.
Mechanism: set_stance stores the stance in one module global (torch._dynamo.eval_frame._stance)
  and every compiled call (compile_wrapper) copies its skip_guard_eval_unsafe into a process-wide
  C flag of eval_frame.c for the call's duration (saved and restored around it). So every thread's
  calls run with guard evaluation cut down to the "differentiating" guards while any one thread is
  inside the unsafe stance, and with one cache entry there is nothing to differentiate: the entry
  runs for any argument. Two threads' save/restore pairs can also interleave and leave the C flag
  wrong for another thread's call even when the stance itself is read per thread.
Trigger: `f(x, k) = x * k` compiled (backend eager) and warmed up once with k=1 in the main
  thread (one cache entry, guarded on k == 1); thread `repro-unsafe` loops `f(x, 1)` inside
  `set_stance(skip_guard_eval_unsafe=True)`; thread `repro-checker` calls `f(x, 2)` --calls times
  and compares each output with eager `x * 2`.
Affected versions: 2.13.0 and 2.14.1 CPU (measured by the harness: catalogue row r28, versions-cpu).
Fix: thread-local-stance (the stance read per thread, compiled calls under the global lock);
  global-lock alone does not hold (the stance stays set for the other thread's locked calls).
Upstream: PR #196637 (makes Dynamo's per-region eval-frame flags thread-local; not in 2.14.1).
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="compiled calls of the checking thread")
    args, fs = setup(p)
    if args.calls < 1:
        print("error: --calls must be >= 1", file=sys.stderr)
        return 2
    import torch

    @torch.compile(backend="eager")
    def f(x, k):
        return x * k

    x = torch.ones(4)
    f(x, 1)  # one cache entry, guarded on k == 1
    stop, entered, wrong, counts = threading.Event(), threading.Event(), [], {"unsafe": 0, "checked": 0}

    def unsafe():
        fs.thread_start("unsafe")
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            entered.set()
            while not stop.is_set():
                with fs.around_call():
                    f(x, 1)  # the one entry's guards hold here: this thread's own use is legitimate
                counts["unsafe"] += 1

    def checker():
        fs.thread_start("checker")
        try:
            entered.wait(timeout=30)  # the stance is in place before the first check
            for k in range(args.calls):
                with fs.around_call():
                    out = f(x, 2)
                counts["checked"] += 1
                if not torch.equal(out, x * 2):  # eager reference
                    wrong.append((k, out[0].item()))
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-unsafe": unsafe, "repro-checker": checker}, deadline_s=120)
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    with fs.around_call():
        after = f(x, 3)  # both threads joined: is the unsafe flag left behind?
    left = not torch.equal(after, x * 3)
    if wrong or left:
        first = f"first at call {wrong[0][0]}: f(x, 2)[0] = {wrong[0][1]}, eager 2.0; " if wrong else ""
        print(
            f"WRONG_RESULT: skip_guard_eval_unsafe leaked across threads: {len(wrong)}/{counts['checked']} "
            f"compiled calls of repro-checker (default stance) unequal to eager ({first}"
            f"{counts['unsafe']} calls in the unsafe stance meanwhile); main after join: "
            f"f(x, 3)[0] = {after[0].item()}{' (left behind)' if left else ''}"
        )
        return 1
    print(
        f"NOT REPRODUCED (wrong results: 0/{counts['checked']}; {counts['unsafe']} calls in the unsafe "
        f"stance meanwhile; main after join: f(x, 3) equal to eager)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
