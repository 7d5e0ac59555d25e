"""The documented F2 workaround set in the main thread only: worker threads still fail (F2 via F14).

User program: a data pipeline whose author met F2 before and applied the fix from the error's
search results at start-up: `torch._dynamo.config.error_on_nested_fx_trace = False` ("when FX is
tracing, run compiled functions eagerly instead of raising"), printed as `nested FX fallback
enabled`. Three prefetch threads run a torch.compile'd augmentation (backend="eager") on
batches while a "model-summary" thread keeps FX-tracing a module to print a layer table. Worker
exceptions are uncaught; the main thread counts the batches produced and exits 1 when short.
What should happen: F2, because of F14. On torch 2.13 Dynamo config assignments are user overrides
kept in a contextvars.ContextVar: a threading.Thread starts with an empty context, so the workers
read the default error_on_nested_fx_trace = True and the workaround never reaches them. A
prefetch thread's compiled call under the summary thread's trace raises `RuntimeError: Detected
that you are using FX to symbolically trace a dynamo-optimized function`; threading.excepthook
prints it; exit 1 (`produced N of 1500 batches`). The output shows F2's face only; F14 is the
reason the workaround in the output (`nested FX fallback enabled`) did not hold.
Expected classification: CRASH (exit 1), race F2 (cause of the failed workaround: F14).
"""

import sys
import threading

import torch
import torch._dynamo
import torch.nn as nn

torch.set_num_threads(1)
torch._dynamo.config.error_on_nested_fx_trace = False  # "the fix" for F2, set once at start-up
print(
    f"nested FX fallback enabled: error_on_nested_fx_trace={torch._dynamo.config.error_on_nested_fx_trace}", flush=True
)


class Summary(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)

    def forward(self, x):
        return self.conv(x).relu().mean(-1)


def augment(x):
    noise = torch.randn_like(x) * 0.01
    return torch.clamp(x + noise, -3, 3).flip(-1)


def main():
    augment_c = torch.compile(augment, backend="eager")
    augment_c(torch.randn(16, 4, 32))
    produced, stop = [], threading.Event()

    def prefetch():
        for _ in range(500):
            produced.append(augment_c(torch.randn(16, 4, 32)))

    def model_summary():
        m = Summary()
        while not stop.is_set():
            torch.fx.symbolic_trace(m)

    summary = threading.Thread(target=model_summary, name="model-summary")
    workers = [threading.Thread(target=prefetch, name=f"prefetch-{i}") for i in range(3)]
    summary.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    summary.join()
    print(f"produced {len(produced)} of 1500 batches", flush=True)
    return 0 if len(produced) == 1500 else 1


if __name__ == "__main__":
    sys.exit(main())
