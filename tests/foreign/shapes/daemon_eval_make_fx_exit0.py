"""Daemon eval threads die of F2 while a daemon graph-capture thread runs make_fx; main exits 0.

User program: a training script. The main thread trains a small MLP eagerly for a fixed number
of steps. Two daemon "evaluator" threads score a held-out batch with a torch.compile'd eval
function (backend="aot_eager") in a loop; a daemon "graph-capture" thread repeatedly captures
the loss function with torch.fx.experimental.proxy_tensor.make_fx (for a graph dump). The main
thread never joins the daemons; after training it prints the final loss and exits 0. The daemons'
loops are bounded and end well before training does (see daemon_torch_at_exit_abort.py for
daemons still inside torch at exit, which abort the process).
What should happen: F2. make_fx's PythonKeyTracer runs torch.fx.Tracer.trace, which sets FX's
process-global is-tracing flag; an evaluator's compiled call raises `RuntimeError: Detected
that you are using FX to symbolically trace a dynamo-optimized function`. threading.excepthook
prints `Exception in thread evaluator-N:` with the traceback; the daemons die and training
continues: exit 0. Expected classification: CRASH (thread exceptions at exit 0), race F2.
"""

import sys
import threading
import time

import torch
from torch.fx.experimental.proxy_tensor import make_fx

torch.set_num_threads(1)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    held_x, held_y = torch.randn(64, 16), torch.randn(64, 1)
    w_probe = torch.randn(16, 1)

    def eval_fn(x, y):
        return ((x @ w_probe - y) ** 2).mean()

    compiled_eval = torch.compile(eval_fn, backend="aot_eager")
    compiled_eval(held_x, held_y)  # compile once before the threads start

    def evaluator():
        for _ in range(3000):
            compiled_eval(held_x, held_y)

    def graph_capture():
        for _ in range(60):
            make_fx(eval_fn)(held_x, held_y)

    for i in range(2):
        threading.Thread(target=evaluator, name=f"evaluator-{i}", daemon=True).start()
    threading.Thread(target=graph_capture, name="graph-capture", daemon=True).start()

    print("training...", flush=True)
    for _ in range(1200):
        x, y = torch.randn(32, 16), torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}", flush=True)
    time.sleep(1.0)  # "let the background threads finish their logging"
    return 0


if __name__ == "__main__":
    sys.exit(main())
