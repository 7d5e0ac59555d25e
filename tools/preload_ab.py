"""`import torch` and a GPU's first use in fresh processes, with and without dflash.preload.

    python -m tools.preload_ab [--rounds 3] [--device cuda]

Each round runs every variant once, in an order rotated by one each round, with the page cache
dropped before each (root only; otherwise every run is warm and the line says so). A variant:
  none     nothing read ahead
  libs     dflash.preload as the trainer starts it (torch's and the CUDA wheels' libraries)
  libs+py  the same, then torch's Python sources
  read     the libraries read through in the thread instead of advised
Prints one line per run (seconds to import torch, then to the device's first GEMM), then each
variant's median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

VARIANTS = ("none", "libs", "libs+py", "read")

CHILD = """
import os, sys, threading, time
t0 = time.monotonic()
from dflash import preload
variant, device = sys.argv[1], sys.argv[2]
def sources():
    for root in preload.package_dirs("torch"):
        for folder, _, files in os.walk(root):
            yield from (os.path.join(folder, f) for f in files if f.endswith(".py"))
def read_all():
    for path in preload.library_paths():
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass
if variant == "libs":
    preload.Preload().start()
elif variant == "libs+py":
    import itertools
    preload.Preload(itertools.chain(preload.library_paths(), sources())).start()
elif variant == "read":
    threading.Thread(target=read_all, daemon=True).start()
import torch
t1 = time.monotonic()
x = torch.ones(1024, 1024, device=device)
(x @ x).sum().item()
print(f"{t1 - t0:.2f} {time.monotonic() - t0:.2f}")
"""


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run(variant: str, device: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, variant, device], capture_output=True, text=True, check=True)
    first, second = out.stdout.split()
    return float(first), float(second)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.preload_ab")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for k in range(args.rounds):
        for i in range(len(VARIANTS)):
            v = VARIANTS[(i + k) % len(VARIANTS)]
            state = "cold" if drop_caches() else "warm (cannot drop the page cache)"
            times[v].append(run(v, args.device))
            print(f"round {k + 1} {v:8} {state}: import {times[v][-1][0]:.2f} s, first GEMM at {times[v][-1][1]:.2f} s")
    for v, ts in times.items():
        med = [statistics.median(t[j] for t in ts) for j in (0, 1)]
        print(f"median {v:8}: import {med[0]:.2f} s, first GEMM at {med[1]:.2f} s ({len(ts)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
