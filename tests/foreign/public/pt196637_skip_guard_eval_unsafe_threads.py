"""Dynamo's per-region eval-frame flags are process-wide: one thread's skip_guard_eval_unsafe stance turns guards off in another.

Source: pytorch/pytorch#196637 ("[torch] Make Dynamo's per-region eval-frame flags thread-local",
2026) https://github.com/pytorch/pytorch/pull/196637

What the reporter saw (alexmalyshev, torch main of 2026-09): four flags in eval_frame.c
(`current_isolate_recompiles_id`, `skip_guard_eval_unsafe`, `fullgraph_compiled_frame_count`,
`fullgraph_error_on_nested_compile`) are process-wide and saved/restored by `compile_wrapper`
around every compiled call, so two threads' save/restore pairs interleave; "a thread inside
`set_stance(skip_guard_eval_unsafe=True)` turns guard evaluation off for every other thread, which
is a silent-wrong-results bug", and an out-of-order unwind leaves the wrong value behind for good.
"This is not free-threading specific, it reproduces under the GIL."

Adaptation (the PR states the scenario, not a script; this is the smallest program for it):
- `f(x, k) = x * k` compiled with backend="eager" and warmed up once with k=1 (one cache entry,
  specialized on k == 1, so in the unsafe stance it runs for any k);
- thread A loops `f(x, 1)` inside `torch.compiler.set_stance(skip_guard_eval_unsafe=True)`;
  thread B (default stance) calls `f(x, 2)` 2,000 times and counts results unequal to x * 2;
- `sys.setswitchinterval(1e-6)` to let the two calls interleave under the GIL;
- both joined with a 60 s deadline; afterwards the main thread calls `f(x, 3)` to see whether the
  unsafe flag was left behind; prints the counts and exits 1 on a wrong result.
"""
import sys
import threading

import torch


@torch.compile(backend="eager")
def f(x, k):
    return x * k


x = torch.ones(4)
f(x, 1)  # one cache entry, guarded on k == 1

stop = threading.Event()
wrong = []


def unsafe_loop():
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        while not stop.is_set():
            f(x, 1)


def checker():
    for _ in range(2000):
        out = f(x, 2)
        if not torch.equal(out, x * 2):
            wrong.append(out[0].item())


sys.setswitchinterval(1e-6)
a = threading.Thread(target=unsafe_loop)
b = threading.Thread(target=checker)
a.start()
b.start()
b.join(timeout=60)
stop.set()
a.join(timeout=60)
sys.setswitchinterval(0.005)
after = f(x, 3)
leaked = not torch.equal(after, x * 3)
print(f"thread B wrong results: {len(wrong)}/2000 (first: {wrong[:3]}); main after join: f(x, 3)[0] = {after[0].item()}")
if wrong or leaked:
    print("skip_guard_eval_unsafe leaked across threads: silent wrong result")
sys.exit(1 if (wrong or leaked) else 0)
