"""Ground truth: what each run of a generated program observed itself (tests/shapes/writer.py's
`$SHAPES_TRUTH/<run>.jsonl`), and the one direct run (`python prog.py`, no harness) that confirms a
program's fault fires before it is judged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.shapes import faults
from tests.shapes.shape import Shape

FIRED, CLEAN, OTHER = "fired", "clean", "other"
DIRECT_TIMEOUT_S = 90.0
HELPER_GRACE_S = 1.0
"""After non-daemon-wait's main ended, how long the direct run waits before killing the program."""


def read_events(path: Path) -> list[dict]:
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash mid-write
    return events


def classify(events: list[dict], fault: str) -> str:
    """One run: FIRED (its fault, and only it), CLEAN (nothing happened) or OTHER. A process that
    started and never ended died of a signal: R5's crash, anything else's surprise."""
    started = Counter(e.get("pid") for e in events if e.get("event") == "start")
    ended = Counter(e.get("pid") for e in events if e.get("event") == "end")
    crashed = any(n > ended[pid] for pid, n in started.items())
    errors = [e.get("error", "") for e in events if e.get("event") == "fault"]
    if fault == "R5":
        return FIRED if crashed else CLEAN if not errors else OTHER
    if crashed:
        return OTHER
    if not errors:
        return CLEAN
    pattern = faults.FIRED[fault]
    return FIRED if pattern and all(re.search(pattern, e) for e in errors) else OTHER


def runs(folder: Path, fault: str) -> list[str]:
    """Each run's classification, one per truth file."""
    return [classify(read_events(p), fault) for p in sorted(folder.glob("*.jsonl"))]


def confirmed(classes: list[str], fault: str) -> bool:
    """Every run did what the fault says: fired, or for `none` stayed clean."""
    want = CLEAN if fault == "none" else FIRED
    return bool(classes) and all(c == want for c in classes)


def direct_run(program: Path, shape: Shape, truth_dir: Path, *, python: str = sys.executable) -> str:
    """Run the program once as a user would; its one run's classification."""
    truth_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SHAPES_TRUTH": str(truth_dir)}
    env.pop("SHAPES_RUN", None)
    with open(truth_dir / "direct-output.txt", "wb") as out:
        proc = subprocess.Popen(
            [python, str(program)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        _wait(proc, truth_dir, waits_forever=shape.ending == "non-daemon-wait")
    classes = runs(truth_dir, shape.fault)
    return classes[0] if len(classes) == 1 else OTHER


def _wait(proc: subprocess.Popen, truth_dir: Path, *, waits_forever: bool) -> None:
    """Until the program exits; one that waits forever by design is killed once its main ended."""
    deadline = time.monotonic() + DIRECT_TIMEOUT_S
    ended_at = None
    while proc.poll() is None and time.monotonic() < deadline:
        if waits_forever and ended_at is None and _main_ended(truth_dir, proc.pid):
            ended_at = time.monotonic()
        if ended_at is not None and time.monotonic() - ended_at > HELPER_GRACE_S:
            break
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _main_ended(truth_dir: Path, pid: int) -> bool:
    path = truth_dir / f"{pid}.jsonl"
    return path.is_file() and any(e.get("event") == "end" and e.get("pid") == pid for e in read_events(path))
