"""Two kinds of FX race in one run: compiled calls fail (F2) and concurrent traces fail (F3).

User program: a model-serving process with a plugin system. Two "server" threads call a
torch.compile'd scoring function (backend="eager", warmed up); three "plugin" threads each
export their own small post-processing module with torch.fx.symbolic_trace in a loop (one
validates the output schema, one builds a debug graph, one checks for unsupported ops). No
thread catches anything; the main thread joins all of them and exits 1 if any thread died.
What should happen: F2 and F3 in the same run, printed by threading.excepthook as tracebacks of
different kinds. F2: while any plugin is inside Tracer.trace, FX's process-global is-tracing
flag is set, so a server's compiled call raises `RuntimeError: Detected that you are using FX to
symbolically trace a dynamo-optimized function`. F3: the plugins' traces interleave their
save/restore of the process-global torch.fx._symbolic_trace.CURRENT_PATCHER, so one of them
raises `AssertionError: CURRENT_PATCHER is None in finally block` (or `CURRENT_PATCHER was
changed during a revert_all_patches`) from `_new_patcher`. The modules have no submodules, so
R4's NameError is unlikely but possible. Expected classification: CRASH, races F2 and F3.
"""

import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)


class SchemaCheck(nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1).float().mean(-1)


class DebugGraph(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * x


class OpAudit(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, x * 0.1).sum(-1)


def main():
    w = torch.randn(32, 8)

    def score(x):
        return torch.log_softmax(x @ w, dim=-1)

    scorer = torch.compile(score, backend="eager")
    scorer(torch.randn(4, 32))

    def server():
        for _ in range(5000):
            scorer(torch.randn(4, 32))

    def plugin(module_cls):
        m = module_cls()
        for _ in range(1500):
            torch.fx.symbolic_trace(m)

    threads = [threading.Thread(target=server, name=f"server-{i}") for i in range(2)]
    threads += [
        threading.Thread(target=plugin, args=(cls,), name=f"plugin-{cls.__name__}")
        for cls in (SchemaCheck, DebugGraph, OpAudit)
    ]
    print("started 2 servers and 3 plugins", flush=True)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Thread objects keep no exception; the user counts threads that did not finish their loop
    # by a side channel: here simply by the excepthook having printed. Exit 1 if anything died.
    return 1 if failed else 0


failed = []
_default_hook = threading.excepthook


def _hook(args):
    failed.append(args.thread.name)
    _default_hook(args)


threading.excepthook = _hook

if __name__ == "__main__":
    sys.exit(main())
