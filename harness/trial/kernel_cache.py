"""Kernel libraries a trial left unfinished in Inductor's on-disk cache, removed after the trial.

Inductor links a CPU kernel straight to its final cache path and builds only when that path does
not exist (`_worker_compile_cpp` in torch 2.13.0, 2.14.1 and 2.15.0), so a g++ killed mid-link
with a trial's process group leaves a truncated `.so` that every later process needing that kernel
loads and fails on (`ImportError: ...main.so: file too short`; catalogue row inductor-cache, seen
on 2.15.0, docs/log/2026-12-02-r25-double-block-mask.md). Once a trial's group is gone the runner
removes the `.so` files written since the trial started that are not whole ELF files and that no
live process holds open (another trial may be linking one right now).
"""

from __future__ import annotations

import getpass
import os
import re
import struct
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

ELF_MAGIC = b"\x7fELF"


def cache_dir(env: Mapping[str, str]) -> Path:
    """The Inductor cache a process with `env` uses: TORCHINDUCTOR_CACHE_DIR, else Inductor's
    default (`torch._inductor.runtime.cache_dir_utils.default_cache_dir`, outside fbcode)."""
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(env["TORCHINDUCTOR_CACHE_DIR"])
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def whole_elf(path: Path) -> bool:
    """Whether `path` holds a complete ELF file: magic, and its section header table inside it
    (a linker writes that table last)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return True  # gone or unreadable: nothing to remove here
    if len(head) < 52 or head[:4] != ELF_MAGIC:
        return False
    endian = "<" if head[5] == 1 else ">"
    if head[4] == 2:  # ELFCLASS64
        if len(head) < 64:
            return False
        (shoff,) = struct.unpack_from(endian + "Q", head, 0x28)
        shentsize, shnum = struct.unpack_from(endian + "HH", head, 0x3A)
    else:
        (shoff,) = struct.unpack_from(endian + "I", head, 0x20)
        shentsize, shnum = struct.unpack_from(endian + "HH", head, 0x2E)
    return size >= shoff + shentsize * shnum


def _open_elsewhere() -> set[str] | None:
    """Paths some live process holds open (Linux /proc); None where that cannot be read."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    held: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    return held


def remove_unfinished(root: Path, since: float) -> list[Path]:
    """Remove the `.so` files under `root` modified at or after `since` (a unix time) that are not
    whole ELF files and that no process holds open; the removed paths. Nothing is removed where
    open files cannot be listed."""
    if not root.is_dir():
        return []
    suspects = [path for path in _kernels_since(root, since) if not whole_elf(path)]
    if not suspects:
        return []
    held = _open_elsewhere()
    if held is None:
        return []
    # Looked at again after the scan: a linker that finished between the first look and the scan
    # closed a whole kernel, which another process may load now (its ImportError: no such file).
    return [path for path in suspects if os.path.realpath(path) not in held and not whole_elf(path) and _unlinked(path)]


def _kernels_since(root: Path, since: float) -> Iterator[Path]:
    """The `.so` files under `root` modified at or after `since`."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".so"):
                continue
            path = Path(dirpath) / name
            try:
                recent = path.stat().st_mtime >= since
            except OSError:
                continue
            if recent:
                yield path


def _unlinked(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
