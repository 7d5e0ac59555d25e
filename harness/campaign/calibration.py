"""PCT's k and n for one workload, measured: the point hits (steps) and the threads that hit a point
in plain runs with every point counted (profile `pct-count`: the points are wrapped, nothing
waits), read from each run's plan-log summary.

k is the median of the runs' step counts and n the median of their thread counts. A run that died
before its summary was written (a native crash skips atexit) gives no count; with no count at all
the profile's stated default k (harness.faults.profiles.PCT_STEPS) stands, with n = 2.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from harness.faults.profiles import PCT_STEPS
from harness.stores.store import ArtefactPath
from harness.trial.folder import PLAN_LOG

DEFAULT_THREADS = 2


@dataclass(kw_only=True, slots=True)
class Calibration:
    k: int
    """Change points are drawn over steps 1..k."""
    n: int
    """Threads taking part, for PCT's bound 1/(n k^(d-1))."""
    steps: list[int] = field(default_factory=list)
    """Each counting run's point hits."""
    threads: list[int] = field(default_factory=list)
    """Each counting run's number of threads that hit a point."""

    @property
    def source(self) -> str:
        return f"measured over {len(self.steps)} run(s)" if self.steps else "stated default"

    def to_json(self) -> dict:
        return {"k": self.k, "n": self.n, "steps": self.steps, "threads": self.threads, "source": self.source}


def plan_summary(artefacts: ArtefactPath) -> dict | None:
    """A trial's plan-log summary (points hit, faults injected, `pct`); None without one (no plan,
    or a native crash)."""
    log = artefacts / PLAN_LOG
    if not log.is_file():
        return None
    for line in reversed(log.read_text(encoding="ascii", errors="replace").splitlines()):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the torn last line of a process that died writing it
            continue
        if rec.get("event") == "summary":
            return rec
    return None


def pct_summary(artefacts: ArtefactPath) -> dict | None:
    """The `pct` part of a trial's plan-log summary; None without one."""
    summary = plan_summary(artefacts)
    return summary.get("pct") if summary is not None else None


def calibrate(summaries: list[dict | None]) -> Calibration:
    """k and n from counting runs' pct summaries (None for a run without one)."""
    counted = [s for s in summaries if s]
    if not counted:
        return Calibration(k=PCT_STEPS, n=DEFAULT_THREADS)
    steps = [int(s["steps"]) for s in counted]
    threads = [len(s["threads"]) for s in counted]
    return Calibration(
        k=max(1, round(statistics.median(steps))),
        n=max(1, round(statistics.median(threads))),
        steps=steps,
        threads=threads,
    )
