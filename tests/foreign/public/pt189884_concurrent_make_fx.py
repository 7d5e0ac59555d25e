"""Two threads each capture a module with make_fx: the traces race on FX's process-global CURRENT_PATCHER.

Source: pytorch/pytorch#189884 ("[functorch] Fix flaky test_concurrent_compile_to_python_smoke
(#189665)", 2026) https://github.com/pytorch/pytorch/pull/189884

What the reporter saw (bobrenjc93, torch main of 2026-07, CPU test): the test spawned two threads,
each running `_compose(m, x)` = `_capture(m, x)` (a `make_fx` symbolic trace) +
`compile_to_python(...)`; only `compile_to_python` is serialized by a lock. "When one thread's
unlocked `_capture` overlapped the `make_fx` nested inside the other thread's `compile_to_python`,
the two traces raced on `CURRENT_PATCHER`: one trace's `_new_patcher` `finally` block observed the
global reset to `None` by the other and raised
`AssertionError: CURRENT_PATCHER is None in finally block`." The test swallowed each thread's
exception into `errors` and failed on `assertEqual(errors, {})`.

Adaptation:
- `compile_to_python` (a functorch entry point newer than torch 2.13) is left out: each thread
  runs `_capture(m, x)` twice, the trace the PR names as the racing one (the second stands in for
  the `make_fx` nested in `compile_to_python`); `_capture` is written here as
  `make_fx(m, tracing_mode="symbolic", _allow_non_fake_inputs=True)(x)` (the test's own `_capture`
  is not shown in the PR; the flag lets the module's real parameters in as constants, so the two
  threads share `m` read-only);
- m is a 2-layer MLP (Linear 8->16->8, ReLU), x is randn(4, 8);
- threads joined with a 60 s deadline; the test's final `assertEqual(errors, {})` becomes: print
  the swallowed tracebacks and exit 1 when `errors` is not empty.
"""
import sys
import threading
import traceback

import torch
from torch.fx.experimental.proxy_tensor import make_fx


def _capture(m, x):
    return make_fx(m, tracing_mode="symbolic", _allow_non_fake_inputs=True)(x)


def _compose(m, x):
    gm = _capture(m, x)
    gm2 = _capture(m, x)  # stands in for the make_fx inside compile_to_python
    return gm, gm2


m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
x = torch.randn(4, 8)
errors = {}


def run(i):
    try:
        _compose(m, x)
    except BaseException:
        errors[i] = traceback.format_exc()


threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=60)
for i, tb in errors.items():
    print(f"--- thread {i} ---")
    print(tb)
print(f"errors: {sorted(errors)}")
sys.exit(1 if errors else 0)
