"""User program: a daemon serving thread dies of an uncaught exception; the main thread notices
the thread is gone and exits 1 (R4).

threading.excepthook prints `Exception in thread server-0:`. The serving thread's eager module
calls run while a model-export thread runs torch.fx.symbolic_trace, which patches
nn.Module.__call__ process-wide: `NameError: module is not installed as a submodule`
(PR pytorch/pytorch#187589).
"""

import sys
import threading
import time

import torch
from r4_parts import Block

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    model, batch, served = Block(), torch.randn(4, 8), []

    def export():
        while True:
            torch.fx.symbolic_trace(Block())

    def serve():
        for _ in range(20000):
            model(batch)
        served.append(True)

    threading.Thread(target=export, name="exporter-0", daemon=True).start()
    server = threading.Thread(target=serve, name="server-0", daemon=True)
    server.start()
    deadline = time.monotonic() + 60
    while server.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not served:
        print("server thread is gone", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
