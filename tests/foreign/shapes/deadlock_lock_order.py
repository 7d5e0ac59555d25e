"""Lock-order inversion around a compiled train step and a compiled eval: a real deadlock.

User program: an online-learning service. A "trainer" thread takes `weights_lock`, runs a
torch.compile'd SGD step (backend="eager") on shared weights, then takes `stats_lock` to record
the loss. A "reporter" thread takes `stats_lock` to snapshot the statistics, then takes
`weights_lock` to run a compiled eval of the current weights. Each holds its first lock across a
few milliseconds of torch work, in opposite orders. The program prints `serving...` and then
both threads loop 500 times; the main thread joins them without a timeout.
What should happen: a deadlock in the user's own code, no torch race. Within the first
iterations the trainer holds weights_lock waiting for stats_lock while the reporter holds
stats_lock waiting for weights_lock (lock.acquire() without a timeout): both threads and the
joining main thread block forever, the CPU goes idle, nothing more is printed.
Expected classification: HANG (no progress, idle), no catalogued race (the generic `hang`).
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def main():
    weights = torch.randn(256, 256) * 0.01
    data = torch.randn(512, 256)
    stats = {"loss": [], "evals": []}
    weights_lock, stats_lock = threading.Lock(), threading.Lock()

    def sgd_step(w, x):
        y = torch.tanh(x @ w)
        loss = (y * y).mean()
        return w - 0.01 * (x.t() @ (y * (1 - y * y))) / x.shape[0], loss

    def evaluate(w, x):
        return torch.tanh(x @ w).abs().mean()

    step = torch.compile(sgd_step, backend="eager")
    score = torch.compile(evaluate, backend="eager")
    step(weights, data)
    score(weights, data)
    start = threading.Barrier(2)

    def trainer():
        nonlocal weights
        start.wait()
        for _ in range(500):
            with weights_lock:
                for _ in range(5):
                    weights, loss = step(weights, data)
                with stats_lock:
                    stats["loss"].append(float(loss))

    def reporter():
        start.wait()
        for _ in range(500):
            with stats_lock:
                snapshot = list(stats["loss"][-10:])
                for _ in range(5):
                    score(torch.randn(256, 256), data)  # "calibrate" while holding the stats
                with weights_lock:
                    stats["evals"].append((float(score(weights, data)), len(snapshot)))

    print("serving...", flush=True)
    threads = [threading.Thread(target=trainer, name="trainer"), threading.Thread(target=reporter, name="reporter")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"done: {len(stats['loss'])} steps, {len(stats['evals'])} evals", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
