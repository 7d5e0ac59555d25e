"""A folder where a stress's or a hunt's runs read and write Python bytecode.

Some images ship torch without .pyc files and set PYTHONDONTWRITEBYTECODE=1, so every run of a
user's program compiles torch's modules first (about 2 s of `import torch` on an H100 host;
`harness doctor` reports it as torch_compiled_from_source). With `--bytecode-cache DIR` each run
gets PYTHONPYCACHEPREFIX=DIR and writing allowed: the first runs write the bytecode, later ones
read it. Opt-in: it changes the program's environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.args import UsageError

HELP = (
    "runs read and write Python bytecode in DIR (PYTHONPYCACHEPREFIX), even where "
    "PYTHONDONTWRITEBYTECODE is set: where torch ships none, runs after the first import it faster"
)


def folder(option: str | None) -> Path | None:
    """--bytecode-cache's folder, made if missing; one that cannot be written is bad input."""
    if option is None:
        return None
    path = Path(option).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--bytecode-cache: cannot make {option}: {e.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--bytecode-cache: {option} is not writable")
    return path


def run_env(cache: Path | None) -> dict[str, str]:
    """A run's environment for `cache`: Python reads and writes its .pyc files there (an empty
    PYTHONDONTWRITEBYTECODE counts as unset)."""
    return {} if cache is None else {"PYTHONPYCACHEPREFIX": str(cache), "PYTHONDONTWRITEBYTECODE": ""}
