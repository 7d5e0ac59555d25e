"""Shard workers keep their exceptions; after join the main thread raises them as one ExceptionGroup.

User program: a feature-extraction job. Four worker threads each featurize one data shard with a
shared torch.compile'd featurizer (a function of tensors, backend="eager", compiled and
checked in the main thread first). A "lineage" thread records the feature pipeline's graph with
torch.fx.symbolic_trace over and over while the job runs (a data-lineage hook). Every thread body
is `try: ... except Exception as e: errors.append(e)`; after joining them all, the main thread
raises `ExceptionGroup(f"{len(errors)} of 4 shard workers failed", errors)` (Python 3.11+), so one
error does not hide the others.
What should happen: F2, exit 1. While the lineage thread is inside Tracer.trace, FX's
process-global is-tracing flag is set, and a worker's compiled call raises `RuntimeError: Detected
that you are using FX to symbolically trace a dynamo-optimized function`. The traceback printed at
exit is an exception group's: `ExceptionGroup: N of 4 shard workers failed (N sub-exceptions)`,
each worker's traceback indented behind `|` bars, no `Exception in thread` header.
Expected classification: CRASH (exit 1), race F2.
"""

import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Pipeline(nn.Module):
    """The feature pipeline as a module, for the lineage record."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 16)

    def forward(self, x):
        return torch.nn.functional.layer_norm(torch.relu(self.proj(x)), (16,))


def main():
    torch.manual_seed(0)
    pipeline = Pipeline().eval()
    w, b = pipeline.proj.weight.detach(), pipeline.proj.bias.detach()

    def featurize(x):
        return torch.nn.functional.layer_norm(torch.relu(x @ w.T + b), (16,))

    fast = torch.compile(featurize, backend="eager")
    shards = [[torch.randn(64, 24) for _ in range(300)] for _ in range(4)]
    assert torch.allclose(fast(shards[0][0]), pipeline(shards[0][0]), atol=1e-5)
    errors, features = [], {}
    done = threading.Event()

    def shard_worker(i):
        try:
            features[i] = torch.cat([fast(x) for x in shards[i]]).mean(0)
        except Exception as e:
            errors.append(e)

    def lineage():
        try:
            while not done.is_set():
                torch.fx.symbolic_trace(pipeline)
        except Exception as e:
            errors.append(e)

    print("featurizing 4 shards", flush=True)
    recorder = threading.Thread(target=lineage, name="lineage")
    workers = [threading.Thread(target=shard_worker, args=(i,), name=f"shard-{i}") for i in range(4)]
    recorder.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    done.set()
    recorder.join()
    if errors:
        raise ExceptionGroup(f"{len(errors)} of 4 shard workers failed", errors)
    print(f"features of {len(features)} shards written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
