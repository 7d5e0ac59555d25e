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
Other faces (the ones a program showed beside F2: tests/foreign/shapes/dict_mutation_beside_f2.py):
  `--container dict --mutation swap` (a plain dict whose size stays while its keys change: one key
  dropped for a new one) raises `dictionary keys changed during iteration`; with `--reads all` (the
  function reads every value, so Dynamo guards each key) a guard also reads a key the mutator
  removed after Dynamo listed it: `InternalTorchDynamoError: KeyError`. Direct runs, torch
  2.13.0+cpu, Python 3.11.7, the 2-core CPU machine, 2026-12-04, 10 runs each:
    --container dict --mutation swap --traces 50 --switch-interval 1e-6: 7/10 runs, all `dictionary
      keys changed during iteration` (0-10 of 50 traces a run);
    --container dict --mutation swap --reads all --items 64 --traces 30 --switch-interval 1e-6: 10/10
      runs, every trace; KeyError in 10, `dictionary keys changed` as well in 4;
    the same without --switch-interval: 10/10 runs, every trace, KeyError only;
    the second with --fix global-lock (the mutator under the lock too): 0/30 traces in 1 run.
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

SIGNATURES = ("mutated during iteration", "changed size during iteration", "keys changed during iteration", "KeyError")


def chain(exc):
    """str() of the exception and its causes: Dynamo wraps the dict's RuntimeError."""
    out = []
    while exc is not None:
        out.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return out


def _face(exc):
    """The failure's face: the dict's own message, or a KeyError (the key's name left out)."""
    inner = [t for t in chain(exc) if any(s in t for s in SIGNATURES)][-1].splitlines()[0]
    return f"{type(exc).__name__}: {inner.split(':')[0] + ': <key>' if inner.startswith('KeyError') else inner}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=100, help="fresh traces (reset + call) in the caller")
    p.add_argument("--items", type=int, default=512, help="entries of the dict argument")
    p.add_argument("--container", choices=("ordereddict", "dict"), default="ordereddict", help="the argument's type")
    p.add_argument(
        "--mutation",
        choices=("insert-pop", "swap"),
        default="insert-pop",
        help="insert-pop: add a key and pop it (the size changes); swap: drop the last added key for a new one "
        "(the size stays, the keys change)",
    )
    p.add_argument(
        "--reads",
        choices=("anchor", "all"),
        default="anchor",
        help="what the compiled function reads: the anchor key, or every value (a guard on each)",
    )
    args, fs = setup(p)
    if args.traces < 1 or args.items < 0:
        print("error: --traces must be >= 1 and --items >= 0", file=sys.stderr)
        return 2
    import torch
    import torch._dynamo

    container = OrderedDict if args.container == "ordereddict" else dict
    state = container((f"item_{i}", i) for i in range(args.items))
    state["anchor"] = 3
    if args.mutation == "swap":
        state["tmp_0"] = 0  # the first key it drops
    x = torch.tensor([1.0, 2.0])

    def fn(mapping, value):
        return value * mapping["anchor"]

    def fn_all(mapping, value):
        total = 0
        for key in mapping:
            total = total + mapping[key]
        return value * mapping["anchor"] + 0 * total

    compiled = torch.compile(fn if args.reads == "anchor" else fn_all, backend="eager")
    stop, failures, done = threading.Event(), [], {"traces": 0, "mutations": 0}

    def mutator():
        fs.thread_start("mutator")
        i = 0
        while not stop.is_set():
            with fs.around_call():
                if args.mutation == "swap":
                    state[f"tmp_{i + 1}"] = i + 1
                    state.pop(f"tmp_{i}", None)
                else:
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
        faces = sorted({_face(exc) for exc in failures})
        print(f"faces: {'; '.join(faces)}")
        print(f"REPRODUCED: {type(first).__name__}: {inner.splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (failed traces: 0/{done['traces']}; {done['mutations']} mutations meanwhile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
