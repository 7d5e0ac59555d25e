"""User program: logging.exception with logging's default format (`ERROR:root:...`) (R4).

An eager evaluation thread logs its failure and the main thread exits 1. A second thread runs
torch.fx.symbolic_trace, which patches nn.Module.__call__ process-wide, so the eager call raises
`NameError: module is not installed as a submodule` (PR pytorch/pytorch#187589).
"""

import logging
import sys
import threading

import torch
from r4_parts import Block, export_until

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    logging.basicConfig()
    model, batch, stop, failed = Block(), torch.randn(4, 8), threading.Event(), []

    def evaluate():
        try:
            for _ in range(20000):
                model(batch)
        except Exception as exc:
            logging.exception("evaluation step failed")
            failed.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=export_until, args=(stop,)), threading.Thread(target=evaluate)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
