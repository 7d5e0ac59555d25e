"""`python -m harness stress` as the tests run it: runs at once, a number of runs, a folder."""

from __future__ import annotations

import sys
from pathlib import Path


def stress_args(runs: int, out: Path, *options: str, cmd: tuple[str, ...], parallel: int = 2) -> list[str]:
    """stress's arguments: `cmd` for `runs` runs, `parallel` at once, failing runs kept in `out`."""
    head = ["stress", "-p", str(parallel), "--max-runs", str(runs), "-o", str(out)]
    return [*head, *options, "--", *cmd]


def stress_argv(runs: int, out: Path, *options: str, cmd: tuple[str, ...], parallel: int = 2) -> list[str]:
    """The same as a command line of this interpreter."""
    return [sys.executable, "-m", "harness", *stress_args(runs, out, *options, cmd=cmd, parallel=parallel)]
