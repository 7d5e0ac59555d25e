"""A config check raises ValueError at start-up, every run, before any thread starts.

User program: a threaded inference server whose config names a dtype by string. It compiles its
model (backend="eager") and then validates `CONFIG["dtype"]`, which is "bf32" (a typo for "bf16"),
with `raise ValueError(f"unsupported dtype {name!r} ...")` in the main thread. The worker threads
are never started.
What should happen: a deterministic failure, not a race: every run prints the same
`ValueError: unsupported dtype 'bf32' (expected one of ...)` traceback and exits 1 within a few
seconds. Expected classification: DETERMINISTIC, no race.
"""

import sys
import threading

import torch

CONFIG = {"dtype": "bf32", "workers": 4, "batch": 8}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_dtype(name):
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r} (expected one of {sorted(DTYPES)})")
    return DTYPES[name]


def main():
    w = torch.randn(32, 32)
    model = torch.compile(lambda x: torch.relu(x @ w), backend="eager")
    model(torch.randn(2, 32))
    dtype = parse_dtype(CONFIG["dtype"])
    threads = [
        threading.Thread(target=lambda: model(torch.randn(CONFIG["batch"], 32).to(dtype)), name=f"worker-{i}")
        for i in range(CONFIG["workers"])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
