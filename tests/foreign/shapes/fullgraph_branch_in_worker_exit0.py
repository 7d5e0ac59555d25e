"""A worker thread's torch.compile(fullgraph=True) of a data-dependent branch fails every run; exit 0.

User program: a batch scorer. The main thread scores batches eagerly at once, while a background
"optimizer" thread compiles the post-processing step with torch.compile(fullgraph=True) (the
engineer wants a single graph for export later) and checks it against the eager step on one
batch, to switch the scorer over when it matches. The step has a Python `if` on a tensor's value
(clip only when the batch's max score is above a threshold). The thread's exception is not
caught: threading.excepthook prints it, the main thread finishes the eager scoring, prints its
summary and exits 0.
What should happen: the same error in every run, a bug of the program, not a race: Dynamo cannot
put a data-dependent branch in one graph, and fullgraph=True turns the graph break into
`torch._dynamo.exc.Unsupported` (data-dependent branching / generic_jump), raised in the
optimizer thread on its first call, every run, whatever the other thread does (it never touches
Dynamo).
Expected classification: DETERMINISTIC (a worker thread failing identically every run), no race.
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def postprocess(scores):
    probs = torch.softmax(scores, dim=-1)
    if probs.max() > 0.9:  # data-dependent Python branch
        probs = probs.clamp(max=0.9)
    return probs / probs.sum(dim=-1, keepdim=True)


def main():
    torch.manual_seed(0)
    w = torch.randn(64, 10) * 0.1
    batches = [torch.randn(32, 64) for _ in range(200)]
    switched = threading.Event()

    def optimizer():
        fast = torch.compile(postprocess, fullgraph=True, backend="eager")
        sample = batches[0] @ w
        if torch.allclose(fast(sample), postprocess(sample)):
            switched.set()

    print("scoring 200 batches", flush=True)
    bg = threading.Thread(target=optimizer, name="optimizer")
    bg.start()
    total = 0.0
    for x in batches:
        total += float(postprocess(x @ w).max())
    bg.join()
    print(
        f"scored {len(batches)} batches, mean max prob {total / len(batches):.3f}; compiled step used: {switched.is_set()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
