"""Threads keep their exception (`errors.append(e)`); after join the main thread `raise errors[0]`.

User program: a checkpoint evaluator. Four threads each evaluate one checkpoint's weights with a
shared torch.compile'd loss (backend="aot_eager", compiled in the main thread first); a fifth
thread, "graph-dump", captures the loss with make_fx for an offline report. Every thread body is
wrapped in `try: ... except Exception as e: errors.append(e)`. After joining all threads the main
thread does `if errors: raise errors[0]`.
What should happen: F2, exit 1. make_fx runs torch.fx.Tracer.trace, which sets FX's
process-global is-tracing flag; an evaluator's compiled call raises `RuntimeError: Detected that
you are using FX to symbolically trace a dynamo-optimized function`. It is caught, kept, and
re-raised from the main thread: the printed traceback starts at `<module>` / `main` (`raise
errors[0]`) and continues into the worker's frames (compile_wrapper); no `Exception in thread`
header, and which thread failed is not in the output. Exit status 1.
Expected classification: CRASH (exit 1), race F2.
"""

import sys
import threading

import torch
from torch.fx.experimental.proxy_tensor import make_fx

torch.set_num_threads(1)


def loss_fn(x, y, w):
    return torch.nn.functional.cross_entropy(x @ w, y)


def main():
    data_x, data_y = torch.randn(128, 32), torch.randint(0, 10, (128,))
    checkpoints = [torch.randn(32, 10) for _ in range(4)]
    loss_c = torch.compile(loss_fn, backend="aot_eager")
    loss_c(data_x, data_y, checkpoints[0])
    errors, results = [], {}

    def evaluate(i):
        try:
            total = 0.0
            for _ in range(400):
                total += float(loss_c(data_x, data_y, checkpoints[i]))
            results[i] = total / 400
        except Exception as e:
            errors.append(e)

    def graph_dump():
        try:
            for _ in range(40):
                make_fx(loss_fn)(data_x, data_y, checkpoints[0])
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=evaluate, args=(i,), name=f"eval-ckpt-{i}") for i in range(4)]
    threads.append(threading.Thread(target=graph_dump, name="graph-dump"))
    print("evaluating 4 checkpoints", flush=True)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for i, v in sorted(results.items()):
        print(f"checkpoint {i}: loss {v:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
