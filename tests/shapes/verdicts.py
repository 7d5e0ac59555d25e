"""The harness's verdict on a generated program, read from `python -m harness stress`, and its
comparison with the expected one (tests/shapes/expected.py).

Stress's stored records come first: each failing run's `<out>/<run>/result.json` (`outcome`);
what no record holds is read from stress's stdout: the totals line (`N runs completed, M
failures ... races: F2 2`) and the deterministic stop's verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.shapes import truth
from tests.shapes.expected import Verdict, expected
from tests.shapes.shape import Shape
from tests.shapes.writer import write
from tests.stress_cli import stress_argv

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
GPU_TIMEOUT_S = 180.0
"""A CUDA fault's run: Inductor compiles its mode="reduce-overhead" model cold on a fresh host."""
HANG_S = 5.0
"""Idle this long and a run is a HANG: non-daemon-wait's programs wait forever by design."""
_TOTALS = re.compile(r"^(\d+) runs completed, (\d+) failures.*?(?:; races: (.*))?$", re.M)
_DETERMINISTIC = re.compile(
    r"^(?:a deterministic failure, not a race|your program fails this way on its own, not by a race)", re.M
)
"""Stress's stop (its first line), not the diagnosis's `on its own (one thread)` below it."""


@dataclass(frozen=True)
class Found:
    runs: int
    failures: int
    races: frozenset[str]
    deterministic: bool
    outcomes: frozenset[str]
    classes: tuple[str, ...]
    """Each stress run's own truth (truth.FIRED, CLEAN, OTHER)."""
    folder: str


def runs_for(shape: Shape) -> int:
    """Three runs where stress's deterministic rule must be able to speak, else two."""
    return 3 if shape.fault == "deterministic" else 2


def stress_command(program: Path, out: Path, runs: int, timeout_s: float = TIMEOUT_S) -> list[str]:
    options = ("--timeout", f"{timeout_s:g}", "--hang", f"{HANG_S:g}")
    return stress_argv(runs, out, *options, cmd=("python", str(program)))


def stress(program: Path, shape: Shape, out: Path, runs: int | None = None) -> Found:
    """Run stress on the program, each run writing its truth under `<out>.truth`."""
    truth_dir = out.with_name(out.name + ".truth")
    shutil.rmtree(truth_dir, ignore_errors=True)
    truth_dir.mkdir(parents=True)
    env = {**os.environ, "SHAPES_TRUTH": str(truth_dir)}
    env.pop("SHAPES_RUN", None)
    cmd = stress_command(program, out, runs or runs_for(shape), GPU_TIMEOUT_S if shape.gpu else TIMEOUT_S)
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    (out.parent / f"{out.name}.stdout.txt").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    return read(done.stdout, out, tuple(truth.runs(truth_dir, shape.fault)))


def read(stdout: str, out: Path, classes: tuple[str, ...]) -> Found:
    m = _TOTALS.search(stdout)
    if m is None:
        raise RuntimeError(f"stress printed no totals line:\n{stdout[-2000:]}")
    races = {r.rsplit(" ", 1)[0] for r in (m.group(3) or "").split(", ") if r}
    outcomes = set()
    for path in out.glob("*/result.json"):
        outcomes.add(str(json.loads(path.read_text()).get("outcome")))
    return Found(
        runs=int(m.group(1)),
        failures=int(m.group(2)),
        races=frozenset(races - {"unknown"}),
        deterministic=_DETERMINISTIC.search(stdout) is not None,
        outcomes=frozenset(outcomes),
        classes=classes,
        folder=str(out),
    )


def differences(want: Verdict, found: Found) -> list[str]:
    """Where the harness's verdict differs from the expected one ([] where it agrees)."""
    diffs = []
    if want.failing is None:
        return _unjudged_failing(want, found)
    if want.failing and found.failures != found.runs:
        diffs.append(f"failing: expected every run, found {found.failures}/{found.runs}")
    if not want.failing and found.failures:
        diffs.append(f"failing: expected none, found {found.failures}/{found.runs}")
    if want.failing and want.races is not None and found.races != want.races:
        diffs.append(f"races: expected {sorted(want.races) or 'none'}, found {sorted(found.races) or 'none'}")
    if want.deterministic is not None and found.deterministic != want.deterministic:
        diffs.append(f"deterministic: expected {want.deterministic}, found {found.deterministic}")
    if want.failing and not found.outcomes <= want.outcomes:
        diffs.append(f"outcome: expected {sorted(want.outcomes)}, found {sorted(found.outcomes)}")
    return diffs


def _unjudged_failing(want: Verdict, found: Found) -> list[str]:
    """Whether runs fail is chance: a failing run must still end as expected."""
    if found.failures and not found.outcomes <= want.outcomes:
        return [f"outcome: expected {sorted(want.outcomes)}, found {sorted(found.outcomes)}"]
    return []


@dataclass(frozen=True)
class Judged:
    shape: Shape
    confirmed: bool
    """Every stress run's truth showed the fault fire (`none`: stay clean)."""
    diffs: tuple[str, ...]
    found: Found

    @property
    def right(self) -> bool:
        return self.confirmed and not self.diffs


def judge(shape: Shape, out: Path, *, runs: int | None = None, program_dir: Path | None = None) -> Judged:
    """Write the program, stress it and compare; unconfirmed where a run's fault did not fire."""
    program = write(shape, program_dir or out.parent)
    found = stress(program, shape, out, runs)
    ok = truth.confirmed(list(found.classes), shape.fault) and len(found.classes) == found.runs
    return Judged(shape, ok, tuple(differences(expected(shape), found)), found)
