"""Torch's and CUDA's shared libraries asked into the page cache while Python imports torch.

On a host whose disk has not been read yet, importing torch is mostly waiting for the disk: the
dynamic loader faults libtorch_cuda and the CUDA libraries in a few pages at a time. On an H100
host the import took 5.2 s with the page cache dropped and 3.5 s warm. `start` asks the kernel
(posix_fadvise WILLNEED) to read those files ahead, from a daemon thread, before the trainer's
first `import torch`; the reads are the kernel's, so the thread holds the GIL only between calls.
It finds the files without importing torch, and a file it cannot open is skipped: it only ever
makes a later read faster.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Iterator

PACKAGES = ("torch", "nvidia")
"""Whose `lib/` folders hold the libraries `import torch` and a GPU's first use load (pip's CUDA
wheels install theirs as `nvidia/<name>/lib`)."""


def package_dirs(name: str) -> list[str]:
    """Where `name` is installed, without importing it (a namespace package may have several)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def library_paths(packages: tuple[str, ...] = PACKAGES) -> Iterator[str]:
    """Every shared library under each package's `lib/` folders, torch's first (it loads the rest)."""
    for name in packages:
        for root in package_dirs(name):
            subs = sorted(os.path.join(root, d, "lib") for d in _listdir(root))
            for folder in (os.path.join(root, "lib"), *subs):
                yield from (os.path.join(folder, f) for f in sorted(_listdir(folder)) if ".so" in f)


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def advise(path: str) -> int:
    """Ask the kernel to read `path` ahead; its size, or 0 where it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        return os.fstat(fd).st_size
    except OSError:
        return 0
    finally:
        os.close(fd)


class Preload:
    """`advise` on each of `paths`, in the daemon thread `preload` (never joined: nothing waits
    for a hint)."""

    def __init__(self, paths: Iterator[str] | None = None) -> None:
        self._paths = paths
        self.files = self.bytes = 0
        self.seconds: float | None = None
        """How long asking took, once done (the reads themselves go on in the kernel)."""
        self._thread = threading.Thread(target=self._run, name="preload", daemon=True)

    def start(self) -> Preload:
        if hasattr(os, "posix_fadvise"):
            self._thread.start()
        return self

    def _run(self) -> None:
        t = time.monotonic()
        for path in self._paths if self._paths is not None else library_paths():
            size = advise(path)
            self.files += size > 0
            self.bytes += size
        self.seconds = time.monotonic() - t
