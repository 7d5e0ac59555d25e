"""A trial's folder: the name of every artefact the runner, the child's bootstrap and the readers
share, and their reading and writing, in one place.

    folder = TrialFolder(store.artefacts_of(record))   # a folder, or a packed trial's zip
    folder.text(folder.output)                         # None when the trial left none

The path may be a `pathlib.Path` or a packed trial's zip path (harness.stores.store.PackedArtefacts):
both take `/`, `is_file()` and `read_text()`; writing is for folders only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
)


class TrialFolder:
    """One trial's artefacts: `folder.output` is the path of OUTPUT in it, and so on."""

    def __init__(self, path: Any) -> None:
        self.path = path

    def __truediv__(self, name: str) -> Any:
        return self.path / name

    output = property(lambda self: self.path / OUTPUT)
    spec = property(lambda self: self.path / SPEC)
    result = property(lambda self: self.path / RESULT)
    heartbeat = property(lambda self: self.path / HEARTBEAT)
    plan = property(lambda self: self.path / PLAN)
    plan_log = property(lambda self: self.path / PLAN_LOG)
    pyspy = property(lambda self: self.path / PYSPY)
    hang_dump = property(lambda self: self.path / HANG_DUMP)
    native_stack = property(lambda self: self.path / NATIVE_STACK)
    stall_dump = property(lambda self: self.path / STALL_DUMP)
    exposure = property(lambda self: self.path / EXPOSURE)
    thread_errors = property(lambda self: self.path / THREAD_ERRORS)

    def has_result(self) -> bool:
        return self.result.is_file()

    @staticmethod
    def text(path: Any) -> str | None:
        """An artefact's text, or None where the trial left none (or it cannot be read)."""
        try:
            return path.read_text(errors="replace") if path.is_file() else None
        except OSError:
            return None

    def read_json(self, path: Any) -> Any:
        return json.loads(path.read_text())

    def clear(self) -> None:
        """A reused folder must not show a previous trial's files."""
        for name in FILES:
            (Path(self.path) / name).unlink(missing_ok=True)

    def write_json(self, path: Path, data: Any) -> None:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
