"""User program: eager nn.Module calls in ThreadPoolExecutor.map while another thread exports the
model with torch.fx.symbolic_trace (R4).

The tracer patches nn.Module.__call__ on the class, process-wide, so a pool worker's plain eager
call enters the tracer and raises `NameError: module is not installed as a submodule`
(PR pytorch/pytorch#187589). `list(pool.map(...))` re-raises it in the main
thread; uncaught: exit 1.
"""

import concurrent.futures
import sys
import threading

import torch
from r4_parts import Block, export_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch, stop = Block(), torch.randn(4, 8), threading.Event()

    def predict(_):
        with torch.no_grad():
            return float(model(batch).sum())

    exporter = threading.Thread(target=export_until, args=(stop,), name="exporter", daemon=True)
    exporter.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            print(f"scored {len(list(pool.map(predict, range(20000))))} batches")
    finally:
        stop.set()


if __name__ == "__main__":
    main()
