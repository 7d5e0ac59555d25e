"""A matrix spec file as the tests write them: command workloads, a store in the test's folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def command(*argv: str, timeout_s: float = 30.0, hang_s: float | None = None) -> dict:
    """A command workload: `argv` after this interpreter."""
    return {"kind": "command", "argv": [sys.executable, *argv], "timeout_s": timeout_s, "hang_s": hang_s or timeout_s}


def spec_dict(folder: Path, name: str, workloads: dict, *, trials: int = 2, workers: int = 2, **more) -> dict:
    return {
        "name": name,
        "store": str(folder / "store"),
        "trials": trials,
        "workers": workers,
        "workloads": workloads,
        **more,
    }


def write_spec(folder: Path, spec: dict) -> Path:
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    return path
