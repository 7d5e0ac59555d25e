"""`python -m harness repro [ID [ARGS...]]`: run one race's minimal reproduction (repro/rNN_*.py), from a
checkout or from an installed package; without an ID, list them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.args import UsageError
from harness.trial.spec import REPO_ROOT

HELP = "run one race's minimal reproduction (list them without an id)"
REPRO_DIR = REPO_ROOT / "repro"
"""The scripts: the checkout's repro/, or the one installed beside the harness package."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", help="repro id (r06) or script name (r06_fx_tracing_flag)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments (--fix NAME, --help, ...)")


def scripts() -> dict[str, Path]:
    return {p.name.split("_", 1)[0]: p for p in sorted(REPRO_DIR.glob("r[0-9][0-9]_*.py"))}


def script_for(rid: str) -> Path:
    found = scripts()
    path = found.get(rid) or next((p for p in found.values() if p.stem == rid), None)
    if path is None:
        raise UsageError(f"no repro {rid!r} in {REPRO_DIR} (ids: {', '.join(found) or 'none'})")
    return path


def run(opts: argparse.Namespace) -> int:
    if opts.id is None:
        for rid, path in scripts().items():
            with open(path, encoding="utf-8") as fh:
                first = fh.readline().strip().strip('"').split(": ", 1)[-1]
            print(f"{rid}  {first}")
        return 0
    path = script_for(opts.id)
    sys.stdout.flush()
    # The same process (pid, environment, the harness's bootstrap under stress) runs the script.
    os.execv(sys.executable, [sys.executable, str(path), *opts.args])
    return 0  # not reached
