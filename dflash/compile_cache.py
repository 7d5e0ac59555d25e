"""Compiled artefacts carried between hosts: torch's portable caches in one file.

`torch.compiler.save_cache_artifacts()` serialises what this process compiled (Inductor kernels,
AOTAutograd graphs, autotuning results, automatic-dynamic profiles); `load_cache_artifacts` on
another host fills its local caches with them before the first compile, so a compile becomes a
cache hit instead of a codegen + C++/Triton build. The file is written atomically (tmp + rename).
"""

from __future__ import annotations

import os

import torch
import torch.compiler

from harness.runtime.errors import ConfigError


def check(path: str | None) -> None:
    """Bad input before anything runs: a folder where the file should go, or no such folder."""
    if not path:
        return
    if os.path.isdir(path):
        raise ConfigError(f"compile.cache_artifacts {path!r} is a folder; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"compile.cache_artifacts: folder {parent!r} does not exist")


def _describe(info) -> str:
    kinds = {k: len(v) for k, v in sorted(getattr(info, "artifacts", {}).items()) if v}
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no artifacts"


def load(path: str) -> str:
    """Load `path` into torch's caches if it exists; a line saying what was loaded."""
    if not os.path.isfile(path):
        return f"{path} not found: compiling cold (written after training)"
    with open(path, "rb") as f:
        blob = f.read()
    try:
        info = torch.compiler.load_cache_artifacts(blob)
    except Exception as e:  # noqa: BLE001  a stale or foreign file: one clear line, exit 2
        raise ConfigError(
            f"compile.cache_artifacts {path!r} could not be loaded by torch "
            f"{torch.__version__}: {type(e).__name__}: {e}"
        ) from None
    if info is None:
        # torch logs why (a checksum, a version) and returns None rather than raising
        raise ConfigError(
            f"compile.cache_artifacts {path!r} could not be loaded by torch "
            f"{torch.__version__} (its warning above says why); delete it to compile cold"
        )
    return f"loaded {len(blob) / 1e6:.1f} MB from {path} ({_describe(info)})"


def save(path: str) -> str | None:
    """Write what this process compiled to `path`; a line saying what, or None if nothing."""
    got = torch.compiler.save_cache_artifacts()
    if got is None:
        return None
    blob, info = got
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    return f"wrote {len(blob) / 1e6:.1f} MB to {path} ({_describe(info)})"
