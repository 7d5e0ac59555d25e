"""A finding: one race named in some runs, or one distinct signature no race names, and its verdict
line: known, suspected, unknown, or what it is where it is no race (slow, the program's own, the
harness's or its fix's doing, a hang that followed another failure)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from harness.diagnosis.failure import AFTER_FAILURE
from harness.diagnosis.fix_advice import FixLine
from harness.diagnosis.matching import Match
from harness.trial import blocking
from harness.trial.outcome import HARNESS_DEFECT

OWN_HANG = re.compile(
    r"a deadlock in the program's own locks|a lost wake-up in the program's own code|"
    r"the program's own threads wait"
)
"""trial.blocking's words for a hang in the program's own code (no torch frame in the way)."""
BUSY = "busy inside torch when dumped"
"""trial.blocking's words for a single dump whose program threads were running in torch."""


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
    measured: str = ""
    """What the user's own side by side showed of the fixes (`held in your runs: global-lock`)."""

    @property
    def race(self) -> str | None:
        """The race the failure is (or is suspected to be); None: no catalogued race matches, or the
        program fails this way on its own."""
        if self.own or not self.matches or self.matches[0].kind == "generic":
            return None
        return self.matches[0].race

    def verdict(self, deterministic: str = "") -> str:
        """One line; `deterministic`: why stress found the failures
        deterministic, which replaces "unknown ... possibly new" for a failure no race names."""
        return verdict(self, deterministic)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["race"] = self.race
        d["verdict"] = self.verdict()
        for f, line in zip(d["fixes"], self.fixes):
            f["held"] = line.held()
            f["count"] = None if line.count is None else dataclasses.asdict(line.count)
        return d


def verdict(f: Finding, deterministic: str = "") -> str:
    """One line; `deterministic`: the reason the failures were found deterministic (stress's
    stop), which replaces "unknown ... possibly new" for a failure no race names."""
    if f.own:
        top = f.matches[0]
        return (
            f"your program fails this way on its own ({f.own}), not by a race: the message is "
            f"{top.race}'s ({top.title})"
        )
    if f.note:
        return f"note: {f.note}"
    if deterministic and f.race is None and f.outcome not in ("OK", "TIMEOUT"):
        return f"deterministic: {deterministic}"
    return _not_a_race(f) or _race_verdict(f)


def _not_a_race(f: Finding) -> str:
    """A slow run, a harness defect, or a hang that is none of the program's races; '' otherwise."""
    if f.outcome == "TIMEOUT":
        return f"slow, not hung: {f.detail or 'still working at its deadline'}"
    if f.outcome == "HARNESS_ERROR" and f.detail.startswith(HARNESS_DEFECT):
        return f"a harness defect, not your program's failure: {f.detail}"
    return _hang_verdict(f) if f.outcome == "HANG" else ""


def _hang_verdict(f: Finding) -> str:
    """A hang that another failure, a slow compile, the harness's fix or the program's own code
    explains; '' for one a race may explain."""
    if not f.race and f.detail.startswith(AFTER_FAILURE):
        return (
            "a hang that followed a thread's failure in the same run (a consumer waiting for what the "
            "failed thread never sent): that failure, named on its own line, is the cause"
        )
    if not f.race and BUSY in f.detail:
        return (
            "probably slow, not hung (one dump; dump again a minute later: other frames mean a slow "
            f"compile, give it longer or a warm cache; the same frames a stall): {f.detail.split('; ', 1)[-1]}"
        )
    if any(words in f.detail for words in blocking.FIX_LOCK_TEXTS):
        # Never the program's locks: the harness's fix made this wait (trial.blocking).
        return f"the fix deadlocks this program, not a race of yours: {f.detail.split('; ', 2)[-1]}"
    if not f.race and OWN_HANG.search(f.detail):
        return f"a hang of the program's own code, not a torch race: {f.detail.split('; ', 2)[-1]}"
    return ""


def _race_verdict(f: Finding) -> str:
    """Which catalogued race the failure is (known or suspected), or unknown."""
    if not f.matches:
        return "unknown: no catalogued race matches (possibly new)"
    top = f.matches[0]
    if top.kind == "generic":
        return f"unknown: a generic failure ({top.race}: {top.title}), no catalogued race matches it"
    if top.kind == "own-state":
        return f"not thread-safe: the test's own state ({top.title}), not a race"
    if top.kind == "not-a-race":
        return f"{top.title} (not a race by itself)"
    how = "suspected" if top.suspected else "known"
    kind = "" if top.kind == "race" else f", a {top.kind}"
    return f"{how}: {top.race} ({top.title}{kind})"
