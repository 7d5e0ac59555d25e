"""A trial's folder: the name of every artefact the runner, the child's bootstrap and the readers
share, and their reading and writing, in one place.

    folder.text(store.artefacts_of(record) / folder.OUTPUT)   # None when the trial left none

The path may be a `pathlib.Path` or a packed trial's zip path (harness.stores.store.PackedArtefacts):
both take `/`, `is_file()` and `read_text()`; writing is for folders only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRIAL_DIR_ENV = "HARNESS_TRIAL_DIR"
"""The trial's own folder, absolute, in the child's environment: where the spec's `files` are."""

OUTPUT = "output.txt"
"""The child's stdout and stderr, interleaved as they came."""
SPEC = "spec.json"
"""The TrialSpec that ran (`harness replay` reruns it)."""
RESULT = "result.json"
"""The TrialResult, as the store holds it."""
HEARTBEAT = "heartbeat"
"""`<n> <unix time>`, rewritten by a workload that beats (progress, not a hang)."""
PLAN = "plan.json"
"""The fault plan the scheduler ran."""
PLAN_LOG = "plan_log.jsonl"
"""The scheduler's decisions, one JSON line each (replay, PCT calibration)."""
PYSPY = "pyspy.json"
"""A hang's py-spy dump (`py-spy dump --json`)."""
HANG_DUMP = "hang_dump.txt"
"""A hang's dump as text (py-spy's, or faulthandler's where py-spy could not)."""
NATIVE_STACK = "native_stack.txt"
"""The crashing thread's native frames, names resolved where the trial's libraries are."""
STALL_DUMP = "stall-dump.txt"
"""A workload's own all-thread dump of a stall (dflash's watchdog), kept with the trial."""
EXPOSURE = "exposure.json"
"""The child's race-window counts (harness.faults.exposure)."""
THREAD_ERRORS = "thread_errors.jsonl"
"""Uncaught thread exceptions, one JSON line each, written by the bootstrap's thread hook."""
THREADS = "threads.json"
"""How many threads the program itself started (`{"started": n, "names": [...]}`), written at exit."""
CONFIG_SETS = "config_sets.jsonl"
"""Each torch config value the program set and the thread that set it, one JSON line each (the
bootstrap's): on torch 2.12+ an override is thread-local (F14)."""
FILES = (
    OUTPUT,
    SPEC,
    RESULT,
    HEARTBEAT,
    PLAN,
    PLAN_LOG,
    PYSPY,
    HANG_DUMP,
    NATIVE_STACK,
    STALL_DUMP,
    EXPOSURE,
    THREAD_ERRORS,
    THREADS,
    CONFIG_SETS,
)


def text(path: Any) -> str | None:
    """An artefact's text, or None where the trial left none (or it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    except OSError:
        return None


def clear(path: Path) -> None:
    """A reused folder must not show a previous trial's files."""
    for name in FILES:
        (Path(path) / name).unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    """An artefact's JSON, or None where the trial left none or it is not JSON (a child killed mid-write)."""
    raw = text(Path(path))
    try:
        return json.loads(raw) if raw is not None else None
    except ValueError:
        return None


def write_json(path: Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
