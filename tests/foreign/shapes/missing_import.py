"""A training script that imports an optional CUDA extension that is not installed: fails at import.

User program: a multi-threaded trainer copied from a GPU box. After `import torch` it does
`from flash_attn import flash_attn_func` at module level (no try/except), before any thread or
compile starts.
What should happen: a deterministic failure, not a race: every run dies within the first
seconds with `ModuleNotFoundError: No module named 'flash_attn'` in the main thread, exit 1, the
same traceback every time. Re-running it (stress) gains nothing.
Expected classification: DETERMINISTIC (same failure every run, fast), no race.
"""

import sys
import threading

import torch
from flash_attn import flash_attn_func  # not installed on this machine


def main():
    q = torch.randn(1, 16, 4, 32)

    def worker():
        flash_attn_func(q, q, q, causal=True)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
