"""`import torch` and a GPU's first use in fresh processes, with and without asking the kernel to
read torch's libraries ahead (posix_fadvise WILLNEED from a thread started before the import).

On a host whose disk has not been read, the import waits on the dynamic loader faulting
libtorch_cuda and the CUDA libraries in a few pages at a time; reading them ahead looked like a way
to shorten a fresh host's start. Measured on an H100 host with the page cache dropped, it did not
(results/h100-2026-12-06-preload), so the trainer does not do it.

    python -m tools.preload_ab [--rounds 3] [--device cuda]

Each round runs every variant once, in an order rotated by one each round, with the page cache
dropped before each (root only; otherwise every run is warm and the line says so). A variant:
  none     nothing read ahead
  libs     torch's and the CUDA wheels' libraries advised (`library_paths`)
  libs+py  the same, then torch's Python sources
  read     the libraries read through in the thread instead of advised
Prints one line per run (seconds to import torch, then to the device's first GEMM), then each
variant's median.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator

VARIANTS = ("none", "libs", "libs+py", "read")

CHILD = """
import sys, time
t0 = time.monotonic()
from tools.preload_ab import start
start(sys.argv[1])
import torch
t1 = time.monotonic()
x = torch.ones(1024, 1024, device=sys.argv[2])
(x @ x).sum().item()
print(f"{t1 - t0:.2f} {time.monotonic() - t0:.2f}")
"""


PACKAGES = ("torch", "nvidia")
"""Whose `lib/` folders hold what `import torch` and a GPU's first use load (pip's CUDA wheels
install theirs as `nvidia/<name>/lib`)."""


def package_dirs(name: str) -> list[str]:
    """Where `name` is installed, without importing it (a namespace package may have several)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def library_paths(packages: tuple[str, ...] = PACKAGES) -> Iterator[str]:
    """Every shared library in each package's `lib/` and `*/lib/` folders, torch's first."""
    for name in packages:
        for root in package_dirs(name):
            subs = sorted(os.path.join(root, d, "lib") for d in _listdir(root))
            for folder in (os.path.join(root, "lib"), *subs):
                yield from (os.path.join(folder, f) for f in sorted(_listdir(folder)) if ".so" in f)


def sources() -> Iterator[str]:
    """torch's Python sources."""
    for root in package_dirs("torch"):
        for folder, _, files in os.walk(root):
            yield from (os.path.join(folder, f) for f in files if f.endswith(".py"))


def advise(paths: Iterable[str]) -> None:
    """Ask the kernel to read each file ahead; one it cannot open is skipped."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def read_through(paths: Iterable[str]) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass


def start(variant: str) -> threading.Thread | None:
    """`variant`'s reads in the daemon thread `preload` (none for `none`)."""
    work = {
        "libs": lambda: advise(library_paths()),
        "libs+py": lambda: advise([*library_paths(), *sources()]),
        "read": lambda: read_through(library_paths()),
    }.get(variant)
    if work is None:
        return None
    t = threading.Thread(target=work, name="preload", daemon=True)
    t.start()
    return t


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
