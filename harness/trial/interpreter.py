"""Which torch and Python an interpreter has, asked without importing torch: what a trial record
says ran, and what a store of another interpreter is named after."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess

from harness.trial.spec import InvalidSpec


@functools.cache
def interpreter_versions(python: str | None) -> tuple[str | None, str]:
    """(torch, Python) versions of the interpreter a trial runs under: the record says what ran,
    not what the harness has. Another interpreter is asked once (its metadata, not an import of
    torch); one that cannot answer is bad input."""
    if python is None:
        return installed_torch(), platform.python_version()
    probe = (
        "import importlib.metadata as m, platform\n"
        "try: v = m.version('torch')\nexcept m.PackageNotFoundError: v = ''\n"
        "print(v); print(platform.python_version())"
    )
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InvalidSpec(f"python: {python} does not run: {exc}") from None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 2:
        raise InvalidSpec(f"python: {python} does not run: {done.stderr.strip()[-200:]}")
    return lines[0] or None, lines[1]


@functools.lru_cache(maxsize=1)
def installed_torch() -> str | None:
    # From the installed metadata: importing torch here would cost seconds per harness start.
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
