"""r08_config_patch_lost: two threads' config patches interleave and `dynamic=False` is forgotten.

Symptom: no error; a function compiled with `torch.compile(..., dynamic=False)` gets a DYNAMIC
  graph (symbolic sizes) when two threads call it with different sizes -- the static-shape
  request is silently lost (#118260: "we eventually lose the race and forget that automatic
  dynamic is supposed to be turned off").
Mechanism: the `dynamic=` kwarg is applied by patching the Dynamo config around each call
  (automatic_dynamic_shapes=False, assume_static_by_default=True); on versions where the config
  is one global object, two threads' enter/exit pairs interleave and restore the wrong values
  (F4). On torch 2.13 overrides are thread-local (F14), so this should NOT reproduce.
Trigger: two threads call the shared compiled function with --sizes distinct sizes each
  (thread 0: 1..n, thread 1: n+1..2n), recompile_limit raised in each thread. H200 probe on 2.11
  (recompile_limit=200, sw 1e-6, 5 trials): trial 0 had 39 static + 1 dynamic graph.
Affected versions: filed 2024-01, 2.11 (1 of 5 trials); not expected on 2.13.
Fix: global-lock (calls, hence patch enter/exit pairs, never interleave).
Upstream: #118260, #111150, #118387, PR #170468 (thread-local config layer), PR #137821.
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup


def is_dynamic(torch, gm):
    """True if any graph input has a symbolic size (the graph was compiled dynamic)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape)
        ):
            return True
    return False


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, default=20, help="distinct sizes per thread")
    p.add_argument("--dynamic", choices=("false", "true"), default="false", help="true = control")
    args, fs = setup(p)
    import torch
    import torch._dynamo

    graphs, lock = {"static": 0, "dynamic": 0}, threading.Lock()

    def backend(gm, example_inputs):
        with lock:
            graphs["dynamic" if is_dynamic(torch, gm) else "static"] += 1
        return gm.forward

    def f(x):
        return x * 2 + 1

    cf = torch.compile(f, backend=backend, dynamic=args.dynamic == "true")

    def worker(first):
        def body():
            fs.thread_start("worker")
            # Thread-local on 2.13 (F14), global on 2.11: set it where the compiles happen.
            torch._dynamo.config.recompile_limit = 4 * args.sizes + 8
            for size in range(first, first + args.sizes):
                with fs.around_call():
                    out = cf(torch.ones(size))
                if not torch.equal(out, torch.full((size,), 3.0)):
                    raise AssertionError("compiled result differs from eager")
                beat()

        return body

    errors = run_threads({"repro-worker-0": worker(1), "repro-worker-1": worker(1 + args.sizes)}, 240)
    if errors:
        return 1
    if graphs["dynamic"] and args.dynamic == "false":
        print(
            f"WRONG_RESULT: dynamic=False lost: {graphs['dynamic']} dynamic + {graphs['static']} static "
            f"graphs (expected {2 * args.sizes} static)"
        )
        return 1
    print(f"NOT REPRODUCED (graphs: {graphs['static']} static, {graphs['dynamic']} dynamic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
