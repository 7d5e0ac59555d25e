"""A finding: one race named in some runs, or one distinct signature no race names, with what it is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.diagnosis import verdicts
from harness.diagnosis.fix_advice import FixLine
from harness.diagnosis.matching import Match


@dataclass(kw_only=True, slots=True)
class Finding:
    """One race named in some runs (whichever of its faces each showed), or one distinct signature
    no race names, and what it is."""

    key: str | None
    summary: str | None
    outcome: str
    runs: int
    sources: list[str]
    torch: str | None
    count: int = 0
    """Tracebacks (or dumps) in all: a run may print one failure from several threads."""
    detail: str = ""
    reports: list[str] = field(default_factory=list)
    """Public reports of the race (catalogue `reports`)."""
    try_fixes: str = ""
    """`harness stress --fix ...` on the user's own command: the measured fixes, raw beside them."""
    matches: list[Match] = field(default_factory=list)
    fixes: list[FixLine] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    repros: list[str] = field(default_factory=list)
    hint: str = ""
    faces: list[str] = field(default_factory=list)
    """The race's other faces in these runs (summaries besides `summary`): one race, named once a run."""
    own: str = ""
    """Why the program fails this way on its own, not by a race (`one thread`): the message is a
    race's, the run's threads or exposure say otherwise; empty: not so."""
    note: str = ""
    """An OK run's face that is no race by itself (the race's `warnings_alone`)."""
    change: str = ""
    """What the program must change where no fix holds on it unedited (the race's edits and hint)."""

    @property
    def race(self) -> str | None:
        """The race the failure is (or is suspected to be); None: no catalogued race matches, or the
        program fails this way on its own."""
        if self.own or not self.matches or self.matches[0].kind == "generic":
            return None
        return self.matches[0].race

    def verdict(self, deterministic: str = "") -> str:
        """One line (harness.diagnosis.verdicts); `deterministic`: why stress found the failures
        deterministic, which replaces "unknown ... possibly new" for a failure no race names."""
        return verdicts.verdict(self, deterministic)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["race"] = self.race
        d["verdict"] = self.verdict()
        for f, line in zip(d["fixes"], self.fixes):
            f["held"] = line.held()
            f["count"] = None if line.count is None else dataclasses.asdict(line.count)
        return d
