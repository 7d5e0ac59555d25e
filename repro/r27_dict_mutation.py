"""r27_dict_mutation: a compile fails because another thread mutates an OrderedDict argument.

Symptom: `torch._dynamo.exc.InternalTorchDynamoError: RuntimeError: OrderedDict mutated during
  iteration` raised by a torch.compile'd call (backend eager) whose argument is an OrderedDict
  that another thread keeps changing; the same call run eagerly succeeds.
Mechanism: while Dynamo traces the call it builds a VariableTracker for the dict argument and
  walks it in Python (VariableBuilder: `all(ConstantVariable.is_literal(k) for k in
  value.keys())`, then the items); the walk spans many bytecodes, so the GIL passes to the
  mutating thread mid-iteration and the dict's own check raises. Dynamo wraps it as an internal
  error. Only the trace iterates in Python: a call that hits the cache runs guards in C++.
Trigger: thread `repro-caller` re-traces `fn(mapping, value) = value * mapping["anchor"]`
  --traces times (torch._dynamo.reset(), then a call) on a --items-item OrderedDict, while thread
  `repro-mutator` inserts and pops one key in a loop. Public report: a 512-item dict under
  `sys.setswitchinterval(1e-6)` (the harness's `switch` plan).
Affected versions: 2.13.0 and 2.14.1 CPU (measured by the harness: catalogue row r27, versions-cpu).
Fix: global-lock, with every mutation of the dict under the lock too (the mutator's
  `fs.around_call()`): the trace then never sees the dict change; or pass the compiled call a copy.
Upstream: #196208 (the report; open).
"""

import argparse
import sys
import threading
import traceback
from collections import OrderedDict

from _common import beat, run_threads, setup

SIGNATURES = ("mutated during iteration", "changed size during iteration")


def chain(exc):
    """str() of the exception and its causes: Dynamo wraps the dict's RuntimeError."""
    out = []
    while exc is not None:
        out.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=100, help="fresh traces (reset + call) in the caller")
    p.add_argument("--items", type=int, default=512, help="entries of the OrderedDict argument")
    args, fs = setup(p)
    if args.traces < 1 or args.items < 0:
        print("error: --traces must be >= 1 and --items >= 0", file=sys.stderr)
        return 2
    import torch
    import torch._dynamo

    state = OrderedDict((f"item_{i}", i) for i in range(args.items))
    state["anchor"] = 3
    x = torch.tensor([1.0, 2.0])

    def fn(mapping, value):
        return value * mapping["anchor"]

    compiled = torch.compile(fn, backend="eager")
    stop, failures, done = threading.Event(), [], {"traces": 0, "mutations": 0}

    def mutator():
        fs.thread_start("mutator")
        i = 0
        while not stop.is_set():
            with fs.around_call():
                state[f"tmp_{i}"] = i
                state.pop(f"tmp_{i}", None)
            i += 1
        done["mutations"] = i

    def caller():
        fs.thread_start("caller")
        try:
            for _ in range(args.traces):
                try:
                    with fs.around_call():
                        torch._dynamo.reset()  # every call traces afresh
                        out = compiled(state, x)
                except Exception as exc:
                    if not any(s in text for text in chain(exc) for s in SIGNATURES):
                        raise
                    failures.append(exc)
                else:
                    if not torch.equal(out, x * 3):
                        raise AssertionError(f"compiled call returned {out.tolist()}, eager {(x * 3).tolist()}")
                done["traces"] += 1
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-mutator": mutator, "repro-caller": caller}, deadline_s=120)
    if failures:
        first = failures[0]
        print(f"=== thread repro-caller failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        inner = [t for t in chain(first) if any(s in t for s in SIGNATURES)][-1]
        print(f"failed traces: {len(failures)}/{done['traces']} ({done['mutations']} mutations meanwhile)")
        print(f"REPRODUCED: {type(first).__name__}: {inner.splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (failed traces: 0/{done['traces']}; {done['mutations']} mutations meanwhile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
