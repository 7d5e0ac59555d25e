"""A feature dict mutated under a compiled scorer, beside an FX exporter: two races in one run.

User program: a ranking service. A "refresher" thread keeps a shared feature dict (name ->
tensor) fresh: every 2 ms it adds a new session feature and drops the oldest (the dict keeps its
size, its keys change). Three scorer threads call one torch.compile'd scoring function
(backend="eager") that sums every feature of the dict it is given: two on a fixed copy, the
"scorer-live" thread on the live dict. An "exporter" thread symbolic_traces a small module in a
loop (a dashboard's graph snapshot). Nobody catches anything; excepthook prints each dead thread.
What should happen: two races in the same run, in different scorer threads.
- dict-mutation (pytorch#196208): in scorer-live a new key set fails the dict's guards, so Dynamo
  re-traces and walks the dict in Python while the refresher changes it: an
  `InternalTorchDynamoError: KeyError` for a key the refresher removed between Dynamo's listing of
  the keys and its guard's read of the value (also logged as `Error while creating guard`), or
  `dictionary keys changed during iteration`.
- F2: while the exporter is inside Tracer.trace, FX's process-global is-tracing flag is set, so the
  other scorers' compiled calls raise `RuntimeError: Detected that you are using FX to symbolically
  trace a dynamo-optimized function`.
Expected classification: CRASH, races dict-mutation and F2 (both in 8 of 8 runs through the
runner, torch 2.13.0+cpu, 2026-12-04; KeyError was the dict-mutation face in each).
"""

import sys
import threading
import time

import torch
import torch.nn as nn

torch.set_num_threads(1)
SESSIONS = 48


class PostProcess(nn.Module):
    def forward(self, scores):
        return torch.softmax(scores, dim=-1).cumsum(-1)


def score(features, x):
    total = x
    for _name, value in features.items():
        total = total + value.sum()
    return total


def main():
    features = {f"session_{i}": torch.full((4,), float(i)) for i in range(SESSIONS)}
    scorer = torch.compile(score, backend="eager")
    x = torch.zeros(4)
    scorer(features, x)  # warm-up compile
    stop = threading.Event()

    def refresher():
        i = SESSIONS
        while not stop.is_set():
            features[f"session_{i}"] = torch.full((4,), float(i))
            features.pop(f"session_{i - SESSIONS}", None)
            i += 1
            time.sleep(0.002)

    def scorer_loop(feats):
        for _ in range(2000):
            scorer(feats, x)

    def exporter():
        post = PostProcess()
        for _ in range(3000):
            torch.fx.symbolic_trace(post)

    background = threading.Thread(target=refresher, name="refresher", daemon=True)
    # Two scorers read the catalogue's fixed features, one the live session features.
    fixed = dict(features)
    threads = [threading.Thread(target=scorer_loop, args=(fixed,), name=f"scorer-{i}") for i in range(2)]
    threads.append(threading.Thread(target=scorer_loop, args=(features,), name="scorer-live"))
    threads.append(threading.Thread(target=exporter, name="exporter"))
    print("serving on 3 scorers, refresher and exporter running", flush=True)
    background.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    background.join()
    print(f"done; dead threads: {failed or 'none'}", flush=True)
    return 1 if failed else 0


failed = []
_default_hook = threading.excepthook


def _hook(args):
    failed.append(args.thread.name)
    _default_hook(args)


threading.excepthook = _hook

if __name__ == "__main__":
    sys.exit(main())
