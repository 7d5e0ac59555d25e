"""`python -m harness stress` as the tests run it: two runs at once, a number of runs, a folder."""

from __future__ import annotations

import sys
from pathlib import Path


def stress_argv(runs: int, out: Path, *options: str, cmd: tuple[str, ...]) -> list[str]:
    """stress over `cmd` for `runs` runs, two at once, failing runs kept in `out`."""
    head = [sys.executable, "-m", "harness", "stress", "-p", "2", "--max-runs", str(runs), "-o", str(out)]
    return [*head, *options, "--", *cmd]
