"""`python -m harness diagnose TARGET ...`: which known race a failure is, and the fix that held.

A signature says "these runs failed the same way"; the diagnosis says which catalogued race that
way is (harness/diagnosis/races.toml), with the evidence of the match, the fixes measured against
that race on the failure's torch (k/n read from the stores now), and the repro to run; or that no
catalogued race matches: possibly new. ClusterFuzz stops at a crash state; the point here is the
step after it, for a program we never saw.

TARGET is any of: a stored trial id (`gpu-repros/r01:raw@-/0`), a trial's artefacts folder (the
runner's `result.json`, `output.txt`, `native_stack.txt`, `pyspy.json`), a `harness stress -o`
folder (each failing run in it), a store folder (`--store`-style: every failing trial), or a plain
file: a program's output, a traceback, a faulthandler or py-spy dump (text or `--json`).

Scores: the summary patterns decide the race (the same first-match rule as harness.diagnosis.families, so a
table's family and a diagnosis agree); message templates and native frames found in the output
add evidence. A generic family (a native crash, an unnamed hang) is not a race: it is "unknown"
unless a race lists it among its `faces` and its `context` matches the run (the fixes it ran with,
the output) on a torch where that race's repro reproduced, which makes it "suspected".

A run is read whole: every failure its record lists, every traceback of its thread hook's records
(thread_errors.jsonl) and of its output, so that each race of the run is named, once a run, by
whichever of its faces showed it; another thread's message in the same output says nothing of a
failure that is not its own.

A fix is offered as `harness stress --fix` only where it held against the race on a program it
reaches unedited, for the face the failure shows (races.toml: a fix's `edit`, `leaves`); where none
did, the diagnosis says what the program must change.

A race's message is not a race where the run shows it could not be one: a program that started no
thread and failed in its main thread fails that way on its own, and so does a run whose exposure
probe measured the race's window and never saw it open. A warning other code prints as well (F14's
default recompile limit) names its race only where the run shows the race's precondition, else it
is a note.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.diagnosis.catalogue import (
    Catalogue,
    Count,
    Evidence,
    Race,
    RecordSource,
    VersionEvidence,
    count,
    load,
    major_minor,
)
from harness.runtime.fixes import FIXES
from harness.runtime.guard import Guard, GuardError
from harness.stores.discovery import TrialNotFound, find_trial, trial_stores_given
from harness.stores.retire import with_retired
from harness.stores.store import Store, StoreError
from harness.text import clip
from harness.trial import blocking, hangs, native, signature, thread_records, tracebacks
from harness.trial.folder import HANG_DUMP, NATIVE_STACK, PYSPY, RESULT, SPEC
from harness.trial.folder import text as folder_text
from harness.trial.interpreter import installed_torch
from harness.trial.outcome import HARNESS_DEFECT, Outcome, TrialResult

SUMMARY_SCORE = 1.0
MESSAGE_SCORE = 0.5
NATIVE_SCORE = 0.5
SUSPECT_SCORE = 0.4
WARNING_SCORE = 0.8
AFTER_FAILURE = "after a thread of the run failed"
OWN_HANG = re.compile(
    r"a deadlock in the program's own locks|a lost wake-up in the program's own code|"
    r"the program's own threads wait"
)
"""trial.blocking's words for a hang in the program's own code (no torch frame in the way)."""
BUSY = "busy inside torch when dumped"
"""trial.blocking's words for a single dump whose program threads were running in torch."""


class DiagnoseError(ValueError):
    """Bad input: one line, exit 2."""


@dataclass(kw_only=True, slots=True)
class Failure:
    """One failing run as the diagnosis sees it."""

    source: str
    outcome: str
    key: str | None
    summary: str | None
    text: str = ""
    native: str = ""
    torch: str | None = None
    fixes: tuple[str, ...] = ()
    """The fixes the run held (a stored trial's strategy), part of the context a face needs."""
    run: str = ""
    """The run it came from (several failures of one run share it); `source` when empty."""
    count: int = 1
    """How often the run printed it (each thread's traceback counts)."""
    detail: str = ""
    """The run's outcome detail (a HANG's kind, a TIMEOUT's busy cores)."""
    command: tuple[str, ...] = ()
    """The user's command (a stress run's), for the `stress --fix` line."""
    threads: tuple[str, ...] = ()
    """The threads that printed it (the run record's failure entry); () where unknown."""
    threads_started: int | None = None
    """Threads the program itself started (TrialResult.threads_started); None: unknown."""
    exposures: dict[str, int] | None = None
    """Openings of each measured race window in the run (TrialResult.exposures); None: not measured."""
    config_threads: str = ""
    """The configs the run set outside the main thread (TrialResult.config_set_in_threads), as JSON."""

    @property
    def run_id(self) -> str:
        return self.run or self.source

    def context(self) -> str:
        """What a race's `context` regexes read: the output, the fixes, the configs set in threads."""
        parts = [self.text, "fixes: " + ",".join(self.fixes)]
        if self.config_threads:
            parts.append(f"config set in threads: {self.config_threads}")
        return "\n".join(parts)


@dataclass(kw_only=True, slots=True)
class Match:
    race: str
    title: str
    kind: str
    score: float
    evidence: list[str]
    suspected: bool = False


@dataclass(kw_only=True, slots=True)
class FixLine:
    name: str
    where: str
    torch: str
    """major.minor the count's trials ran on ('' for a note)."""
    count: Count | None
    note: str = ""
    same_torch: bool = False
    edit: str = ""
    """The edit of the program the count was measured with (FixEvidence.edit): not a no-edit fix."""
    leaves: str = ""
    """The face of this failure the fix does not remove (FixEvidence.leaves' hit), if any."""

    def held(self) -> bool | None:
        return None if self.count is None or not self.count.n else self.count.k == 0

    def offered(self) -> bool:
        """Whether `--fix` may offer it on the program as it is: it held, unedited, for this face."""
        return self.held() is True and not self.edit and not self.leaves

    def text(self) -> str:
        if self.count is None:
            return f"{self.name}: {self.note}"
        if not self.count.n:
            return f"{self.name}: no record ({self.where} holds no trials here)"
        verdict = "held" if self.held() else "did not hold"
        on = f"torch {self.torch}" if self.torch else "torch ?"
        note = "".join(
            f"; {x}"
            for x in (
                self.note,
                self.edit and f"measured with an edit: {self.edit}",
                self.leaves and f"leaves {self.leaves!r}",
            )
            if x
        )
        return f"{self.name}: {verdict}, {self.count.text()} ({on}; {self.where}){note}"


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
        """One line; `deterministic`: the reason the failures were found deterministic (stress's
        stop), which replaces "unknown ... possibly new" for a failure no race names."""
        if self.own:
            top = self.matches[0]
            return (
                f"your program fails this way on its own ({self.own}), not by a race: the message is "
                f"{top.race}'s ({top.title})"
            )
        if self.note:
            return f"note: {self.note}"
        if deterministic and self.race is None and self.outcome not in ("OK", "TIMEOUT"):
            return f"deterministic: {deterministic}"
        if self.outcome == "TIMEOUT":
            return f"slow, not hung: {self.detail or 'still working at its deadline'}"
        if self.outcome == "HANG" and not self.race and self.detail.startswith(AFTER_FAILURE):
            return (
                "a hang that followed a thread's failure in the same run (a consumer waiting for what the "
                "failed thread never sent): that failure, named on its own line, is the cause"
            )
        if self.outcome == "HANG" and not self.race and BUSY in self.detail:
            return (
                "probably slow, not hung (one dump; dump again a minute later: other frames mean a slow "
                f"compile, give it longer or a warm cache; the same frames a stall): {self.detail.split('; ', 1)[-1]}"
            )
        if self.outcome == "HANG" and any(words in self.detail for words in blocking.FIX_LOCK_TEXTS):
            # Never the program's locks: the harness's fix made this wait (trial.blocking).
            return f"the fix deadlocks this program, not a race of yours: {self.detail.split('; ', 2)[-1]}"
        if self.outcome == "HARNESS_ERROR" and self.detail.startswith(HARNESS_DEFECT):
            return f"a harness defect, not your program's failure: {self.detail}"
        if self.outcome == "HANG" and not self.race and OWN_HANG.search(self.detail):
            return f"a hang of the program's own code, not a torch race: {self.detail.split('; ', 2)[-1]}"
        if not self.matches:
            return "unknown: no catalogued race matches (possibly new)"
        top = self.matches[0]
        if top.kind == "generic":
            return f"unknown: a generic failure ({top.race}: {top.title}), no catalogued race matches it"
        how = "suspected" if top.suspected else "known"
        kind = "" if top.kind == "race" else f", a {top.kind}"
        return f"{how}: {top.race} ({top.title}{kind})"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["race"] = self.race
        d["verdict"] = self.verdict()
        for f, line in zip(d["fixes"], self.fixes):
            f["held"] = line.held()
            f["count"] = None if line.count is None else dataclasses.asdict(line.count)
        return d


# ------------------------------------------------------------------------------------- matching


def match(
    failure: Failure, catalogue: Catalogue, records_of: RecordSource, named: frozenset[str] = frozenset()
) -> list[Match]:
    """Catalogue races that fit the failure, best first: the race its summary names (the
    families' first-match rule), else races suspected behind its generic family. `named`: races
    another failure of the same run names by its own summary; the run's output shows their
    messages, which say nothing of this failure."""
    if failure.outcome == "OK":
        return _warning_faces(failure, catalogue)
    if failure.outcome == "TIMEOUT":
        return []
    family = catalogue.family(failure.summary)
    matches: list[Match] = []
    if family not in ("other", "?"):
        race = catalogue.race(family)
        if race.native and failure.native and _first_hit(race.native, failure.native) is None:
            # The message is the race's, its own native frames are not there, another's are: that
            # other (a daemon thread ended at exit prints stash-exit-finalize's terminate message).
            other = [m for m in _by_native(failure, catalogue) if m.race != race.id]
            if other:
                return other
        ev = [f"signature summary matches /{_which(race.summaries, failure.summary or '')}/"]
        score = SUMMARY_SCORE + _extra(race, failure, ev)
        matches.append(Match(race=race.id, title=race.title, kind=race.kind, score=score, evidence=ev))
    if family in ("other", "?") or catalogue.race(family).kind == "generic":
        matches[:0] = _suspects(family, failure, catalogue, records_of)
        # A native crash whose frames are a race's own (R5's cache-entry insertion) is that race,
        # wherever the Python frame of the crash happened to be.
        matches[:0] = _by_native(failure, catalogue)
        if family in ("other", "?"):
            matches += [m for m in _by_text(failure, catalogue) if m.race not in named]
    return matches


def _warning_faces(failure: Failure, catalogue: Catalogue) -> list[Match]:
    """A run that did not fail but whose output shows a race: its warning-level face (F10's
    recompile limit: those threads ran eagerly) or a race's message logged and carried on."""
    out = []
    for race in catalogue.races:
        if race.kind == "generic":
            continue
        message = _first_hit(race.messages, failure.text)
        hit = _first_hit(race.warnings, failure.text) or message
        if hit is None:
            continue
        evidence = [f"at {failure.detail or 'exit 0'}, the output shows {hit!r}"]
        # A warning other code prints as well (F14's default recompile limit) suggests the race only
        # where the run shows its precondition (a thread set the limit); alone it names nothing.
        unsure = message is None and bool(race.warnings_unsure)
        if unsure:
            shown = _first_hit(race.context, failure.context())
            if shown is None:
                continue
            evidence += [f"not shown by that line alone: {race.warnings_unsure}", f"the run shows {shown!r}"]
        out.append(
            Match(
                race=race.id,
                title=race.title,
                kind=race.kind,
                score=SUSPECT_SCORE if unsure else WARNING_SCORE,
                evidence=evidence,
                suspected=unsure,
            )
        )
    out.sort(key=lambda m: -m.score)
    return out


def _warning_notes(failure: Failure, catalogue: Catalogue) -> str:
    """The notes an OK run's unsure warnings get where no race is named by them (F14's recompile
    limit hit with no thread that set it: `recompile limit hit (not a race by itself)`)."""
    notes = [
        race.warnings_alone
        for race in catalogue.races
        if race.warnings_alone
        and _first_hit(race.warnings, failure.text) is not None
        and _first_hit(race.context, failure.context()) is None
    ]
    return "; ".join(dict.fromkeys(notes))


def faces(text: str, catalogue: Catalogue | None = None) -> list[str]:
    """`RACE (title)` for each race an OK run's output shows (stress keeps such runs)."""
    catalogue = catalogue or load()
    return [
        f"{m.race} ({m.title})" + (", suspected" if m.suspected else "")
        for m in _warning_faces(Failure(source="", outcome="OK", key=None, summary=None, text=text), catalogue)
    ]


def _which(patterns: Sequence[str], text: str) -> str:
    """The first pattern that matches (evidence text)."""
    return next((p for p in patterns if re.search(p, text)), patterns[0])


def _first_hit(patterns: Sequence[str], text: str) -> str | None:
    """The text the first matching pattern found, or None."""
    return next((m.group(0) for p in patterns if (m := re.search(p, text))), None)


def _extra(race: Race, failure: Failure, ev: list[str]) -> float:
    score = 0.0
    if (hit := _first_hit(race.messages, failure.text)) is not None:
        ev.append(f"message {hit!r}")
        score += MESSAGE_SCORE
    if (hit := _first_hit(race.native, failure.native)) is not None:
        ev.append(f"native frame {hit!r}")
        score += NATIVE_SCORE
    return score


def _suspects(family: str, failure: Failure, catalogue: Catalogue, records_of: RecordSource) -> list[Match]:
    """Races whose `faces` include this generic family, whose `context` is in the run, on a torch
    where their repro reproduced."""
    out = []
    context = failure.context()
    for race in catalogue.races:
        if family not in race.faces:
            continue
        hit = _first_hit(race.context, context)
        if hit is None:
            continue
        seen = _reproduced_on(race, failure.torch, records_of)
        if seen is None:
            continue
        ev = [f"a {family} in a run with {hit!r}", seen]
        out.append(
            Match(race=race.id, title=race.title, kind=race.kind, score=SUSPECT_SCORE, evidence=ev, suspected=True)
        )
    return out


def _reproduced_on(race: Race, torch: str | None, records_of: RecordSource) -> str | None:
    """Where the race's own repro failed on this torch (major.minor), or None."""
    if not torch:
        return None
    here = major_minor(torch)
    for v in race.versions:
        if v.torch != here or v.store is None:
            continue
        c = count(v, race, records_of)
        if c is not None and c.k:
            return f"its repro reproduced {c.k}/{c.n} on torch {here} ({v.where()})"
    return None


def _by_native(failure: Failure, catalogue: Catalogue) -> list[Match]:
    out = []
    for race in catalogue.races:
        hit = _first_hit(race.native, failure.native)
        if hit is not None:
            out.append(
                Match(
                    race=race.id,
                    title=race.title,
                    kind=race.kind,
                    score=NATIVE_SCORE + SUMMARY_SCORE / 2,
                    evidence=[f"native frame {hit!r} in the crashing thread"],
                )
            )
    return out


def _by_text(failure: Failure, catalogue: Catalogue) -> list[Match]:
    """No signature family: races whose message templates or native frames are in the output
    (a log whose signature did not parse, a program that printed the error and exited 0)."""
    out = []
    for race in catalogue.races:
        ev: list[str] = []
        score = _extra(race, failure, ev)
        if score:
            out.append(Match(race=race.id, title=race.title, kind=race.kind, score=score, evidence=ev))
    return sorted(out, key=lambda m: -m.score)


def fix_lines(race: Race, torch: str | None, records_of: RecordSource, text: str = "") -> list[FixLine]:
    """The race's measured fixes, those on the failure's torch first; `text` (the failure's output)
    tells which fixes leave the face it shows."""
    here = major_minor(torch) if torch else None
    lines = []
    for fe in race.fixes:
        c = count(fe, race, records_of)
        measured = ",".join(sorted({major_minor(t) for t in c.torch})) if c else ""
        lines.append(
            FixLine(
                name=fe.name,
                where=fe.where() if fe.store else "",
                torch=measured,
                count=c,
                note=fe.note,
                same_torch=bool(here) and here in measured.split(","),
                edit=fe.edit,
                leaves=(_first_hit(fe.leaves, text) or "") if text else "",
            )
        )
    return sorted(lines, key=lambda f: (not f.same_torch, f.held() is not True))


_REPRO_DIR = Path(__file__).resolve().parents[2] / "repro"
"""The checkout's repro/, or the one an installed package carries beside harness/."""


def _script_path(script: str) -> str:
    """The script as a user types it from here: relative inside the current folder, else absolute
    (an installed package's scripts live in site-packages)."""
    path = _REPRO_DIR / f"{script}.py"
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def repro_commands(race: Race, catalogue: Catalogue) -> list[str]:
    rows = {r.id: r for r in catalogue.repros if r.on_torch is None}
    out = []
    for rid in race.repros:
        row = rows.get(rid)
        script = row.script if row else next((p.stem for p in sorted(_REPRO_DIR.glob(f"{rid}_*.py"))), rid)
        plan = f" --plan {row.plan}" if row and row.plan else ""
        args = "".join(f" {a}" for a in row.args) if row else ""
        out.append(f"python -m harness stress -p 2 --max-runs 10{plan} -- python {_script_path(script)}{args}")
    return out


def try_fixes_command(fixes: Sequence[FixLine], command: Sequence[str], limit: int = 3) -> str:
    """`stress --fix none --fix A ...` on the user's command: the fixes with hooks that held against
    the race on a program they reach unedited, for the face it shows (on this torch first), raw
    beside them on the same seeds; '' where none did."""
    sets: list[str] = []
    for line in sorted(fixes, key=lambda f: (not f.same_torch, f.held() is not True)):
        if not line.offered():
            continue
        names = tuple(line.name.replace("+", ",").split(","))
        try:
            guard = Guard(names)
        except GuardError:
            continue  # a script argument (`--x`), not a registry fix
        if guard.policies or ",".join(guard.names) in sets:
            continue
        sets.append(",".join(guard.names))
    if not sets:
        return ""
    cmd = " ".join(shlex.quote(a) for a in command) if command else "python YOUR_PROGRAM.py"
    return (
        "python -m harness stress -p 2 --max-runs 20 --fix none "
        + " ".join(f"--fix {s}" for s in sets[:limit])
        + f" -- {cmd}"
    )


def change_text(race: Race, fixes: Sequence[FixLine]) -> str:
    """What the program must change where no fix holds on it as it is: the edits the measured fixes
    needed, then the race's own advice (its hint, else its title)."""
    edits = [f"{x.name} held only where {x.edit}" for x in fixes if x.held() and x.edit]
    left = [f"{x.name} leaves this face ({x.leaves!r})" for x in fixes if x.held() and x.leaves]
    return "; ".join([*edits, *left, race.hint or f"remove the race: {race.title}"])


@dataclass(slots=True)
class _Seen:
    """One failure as matched: its races, and whether it is the program's own or a note."""

    failure: Failure
    matches: list[Match]
    own: str = ""
    note: str = ""


def diagnose(
    failures: Iterable[Failure], *, catalogue: Catalogue | None = None, records_of: RecordSource | None = None
) -> list[Finding]:
    """One finding per race, named once a run whichever of its faces (signatures, threads) showed
    it, and one per distinct signature no race names; most runs first. Unnamed runs of one
    signature split only where their context differs: a native crash in a run that seeded the C
    stash is suspected to be stash-refcount, the same crash in a run that did not stays unknown."""
    catalogue = catalogue or load()
    records_of = records_of or RecordSource()
    failures = list(failures)
    named = _named_per_run(failures, catalogue)
    groups: dict[tuple, list[_Seen]] = {}
    for f in failures:
        seen = _see(f, catalogue, records_of, named.get(f.run_id, frozenset()))
        if seen is not None:
            groups.setdefault(_group_key(seen), []).append(seen)
    findings = [_finding(group, catalogue, records_of) for group in groups.values()]
    return sorted(findings, key=lambda f: -f.runs)


def _named_per_run(failures: Sequence[Failure], catalogue: Catalogue) -> dict[str, frozenset[str]]:
    """The races each run's failures name by their own summaries (the families' rule)."""
    out: dict[str, set[str]] = {}
    for f in failures:
        family = catalogue.family(f.summary)
        if family not in ("other", "?") and catalogue.race(family).kind != "generic":
            out.setdefault(f.run_id, set()).add(family)
    return {run: frozenset(races) for run, races in out.items()}


def _see(f: Failure, catalogue: Catalogue, records_of: RecordSource, named: frozenset[str]) -> _Seen | None:
    """The failure matched; None for a clean OK run (nothing to say)."""
    matches = match(f, catalogue, records_of, named - {catalogue.family(f.summary)})
    note = _warning_notes(f, catalogue) if f.outcome == "OK" and not matches else ""
    if f.outcome == "OK" and not matches and not note:
        return None
    top = matches[0] if matches else None
    own = _on_its_own(f, catalogue.race(top.race)) if top is not None and top.kind != "generic" else ""
    return _Seen(f, matches, own, note)


def _on_its_own(failure: Failure, race: Race) -> str:
    """Why a failure showing a race's message is the program's own doing, not that race: it ran
    with one thread (the race needs two), or the race's window was measured and never opened."""
    if race.kind != "race":
        return ""
    if failure.threads_started == 0 and _main_thread_only(failure):
        return "one thread"
    if race.exposure and (failure.exposures or {}).get(race.id) == 0:
        return f"{race.id}'s window ({race.exposure}) was measured and never opened in the run"
    return ""


def _main_thread_only(failure: Failure) -> bool:
    """Whether the failure's text shows the main thread only (no other thread printed a failure)."""
    if any(t not in ("", "MainThread") for t in failure.threads):
        return False
    return re.search(r"^Exception in thread (?!MainThread\b)", failure.text, re.M) is None


def _group_key(seen: _Seen) -> tuple:
    """A race's faces group under the race; anything else under its signature and what it is."""
    f, top = seen.failure, (seen.matches[0] if seen.matches else None)
    if top is not None and top.kind != "generic" and not seen.own:
        return ("race", top.race, top.suspected, f.outcome == "OK")
    return ("signature", f.key or f.summary or f.outcome, top.race if top else None, seen.own, seen.note)


def _finding(group: Sequence[_Seen], catalogue: Catalogue, records_of: RecordSource) -> Finding:
    # The richest run of the group speaks for it (a trial whose artefacts were kept).
    best = max(group, key=lambda s: (len(s.matches[0].evidence) if s.matches else 0, bool(s.failure.text)))
    first = best.failure
    sources = list(dict.fromkeys(s.failure.run_id for s in group))
    finding = Finding(
        key=first.key,
        summary=first.summary,
        outcome=first.outcome,
        runs=len(sources),
        sources=sources,
        torch=first.torch,
        matches=best.matches,
        count=sum(s.failure.count for s in group),
        detail=first.detail,
        own=best.own,
        note=best.note,
    )
    finding.faces = _other_faces(first.summary, [s.failure.summary for s in group])
    if finding.race is not None:
        _explain(finding, catalogue.race(finding.race), first, catalogue, records_of)
    elif best.matches and not best.own:
        finding.hint = catalogue.race(best.matches[0].race).hint
    return finding


def _other_faces(shown: str | None, summaries: Sequence[str | None], limit: int = 3) -> list[str]:
    """The group's summaries besides the one shown, one per shape (numbers and quoted names aside)."""
    shape = lambda x: re.sub(r"'[^']*'|\b\w*\d\w*\b", "_", x)  # noqa: E731
    seen = {shape(shown or "")}
    out = []
    for x in summaries:
        if x and shape(x) not in seen:
            seen.add(shape(x))
            out.append(x)
    return out[:limit]


def _explain(finding: Finding, race: Race, first: Failure, catalogue: Catalogue, records_of: RecordSource) -> None:
    """A named race's fixes, versions, repros and advice; what to change where no fix is offered."""
    finding.fixes = fix_lines(race, first.torch, records_of, first.text)
    finding.versions = version_lines(race, records_of)
    finding.repros = repro_commands(race, catalogue)
    finding.hint = race.hint
    finding.try_fixes = try_fixes_command(finding.fixes, first.command)
    finding.reports = list(race.reports)
    if not finding.try_fixes:
        finding.change = change_text(race, finding.fixes)


def version_verdict(race: Race, v: VersionEvidence, records_of: RecordSource) -> str:
    """One torch's verdict: measured (k/n of the race, and its fixes' failures) or the source's word."""
    c = count(v, race, records_of)
    seen = ""
    if c is not None and not c.n:
        seen = f"no record ({v.where()} holds no trials here)"
    elif c is not None:
        seen = f"{'reproduces' if c.k else 'not reproduced'} {c.k}/{c.n}"
        # The fix cells counted as any cells are; any failure there (Count.failed) counts against it.
        f = count(Evidence(store=v.store, cells=v.fix_cells), race, records_of) if v.fix_cells else None
        if f is not None and f.n:
            # Where the race is gone a fix can only be unneeded or, failing, harmful.
            word = (
                ("fix holds" if c.k else "fix no longer needed")
                if f.failed == 0
                else ("fix fails" if c.k else "fix now harmful")
            )
            seen += f", {word} ({f.failed}/{f.n} failed)"
        seen += f" ({v.where()}{'; ' + ', '.join(v.fix_cells) if v.fix_cells else ''})"
    return "; ".join(x for x in (seen, v.note) if x)


def version_lines(race: Race, records_of: RecordSource) -> list[str]:
    """Per torch: where the race was seen (k/n now) or what the source says."""
    return [f"torch {v.torch}: {version_verdict(race, v, records_of)}" for v in race.versions]


# --------------------------------------------------------------------------------------- inputs


def from_record(record: TrialResult, art=None) -> Failure:
    """A stored trial's first failure; its artefacts (a folder or a packed zip) add the output and
    native stack. `failures_of` gives every failure of the run."""
    return failures_of(record, art)[0]


def failures_of(record: TrialResult, art=None, *, every_thread: bool = False) -> list[Failure]:
    """Every distinct failure of a stored run (TrialResult.failures), each with the run's output;
    one for a run stored before failures were kept, or whose failure printed no traceback (a hang,
    a signal). `every_thread`: also each face the artefacts show that the record lacks (the thread
    hook's thread_errors.jsonl, every traceback of the whole output), so that every race of the run
    is named."""
    # The output less libraries' noise, plus the program's Futures' exceptions (recorded, not printed).
    text, own_blocks = thread_records.program_view(art) if art is not None else ("", [])
    base = Failure(
        source=record.trial_id,
        outcome=record.outcome.name,
        key=record.signature,
        summary=record.signature_summary,
        text=text,
        native=_read(art, NATIVE_STACK),
        torch=record.torch_version,
        fixes=_fixes_of(record),
        run=record.trial_id,
        detail=record.detail,
        threads_started=getattr(record, "threads_started", None),
        exposures=record.exposures,
        config_threads=_config_threads(record),
    )
    entries = [e for e in record.failures or () if isinstance(e, dict) and e.get("key")]
    if every_thread:
        entries = _every_face(entries, base.text, own_blocks, record)
    if record.outcome.name == "HANG" and entries:
        # A thread died before the rest hung (a producer whose consumer then waits forever): the
        # hang and each printed failure are findings of the run.
        base.detail = f"{AFTER_FAILURE}; {record.detail}"
        return [base] + [dataclasses.replace(_of_entry(base, e), outcome="CRASH", detail="") for e in entries]
    if record.outcome.name not in ("CRASH", "ABORT") or len(entries) < 2:
        return [dataclasses.replace(base, threads=_entry_threads(entries[0])) if entries else base]
    return [_of_entry(base, e) for e in entries]


def _of_entry(base: Failure, entry: dict) -> Failure:
    return dataclasses.replace(
        base,
        key=entry["key"],
        summary=entry.get("summary"),
        count=int(entry.get("count") or 1),
        threads=_entry_threads(entry),
    )


def _entry_threads(entry: dict) -> tuple[str, ...]:
    threads = entry.get("threads") or ()
    return tuple(str(t) for t in threads) if isinstance(threads, list) else ()


def _every_face(entries: list[dict], text: str, hooked: list[str], record: TrialResult) -> list[dict]:
    """The record's failures, then each failure the output and the thread hook's records show that
    none of them is (by key, summary or race): a record kept fewer (stored before they were all
    kept, or by an older signature version)."""
    if record.signature and not entries and record.outcome.name in ("CRASH", "ABORT"):
        entries = [{"key": record.signature, "summary": record.signature_summary, "count": 1}]
    seen = {e["key"] for e in entries} | {e.get("summary") for e in entries}
    races = {_race_of(e.get("summary")) for e in entries} - {None}
    for found in signature.run_failures(text, extra=hooked):
        entry = found.to_json()
        race = _race_of(entry["summary"])
        if entry["key"] in seen or entry["summary"] in seen or (race is not None and race in races):
            continue
        entries.append(entry)
        seen |= {entry["key"], entry["summary"]}
        races.add(race)
    return entries


def _race_of(summary: str | None) -> str | None:
    """The catalogued race a summary names by the families' rule; None for a generic or no race."""
    catalogue = load()
    family = catalogue.family(summary)
    return None if family in ("other", "?") or catalogue.race(family).kind == "generic" else family


def _config_threads(record: TrialResult) -> str:
    """The record's configs set outside the main thread (a field newer runners write), as JSON."""
    value = getattr(record, "config_set_in_threads", None)
    return json.dumps(value, sort_keys=True, default=str) if value else ""


def _read(art, name: str) -> str:
    return (folder_text(art / name) if art is not None else None) or ""


def from_text(text: str, *, source: str, rc: int | None = None, torch: str | None = None) -> Failure | None:
    """A plain log's first failure (`failures_in_text` gives them all)."""
    found = failures_in_text(text, source=source, rc=rc, torch=torch)
    return found[0] if found else None


def failures_in_text(text: str, *, source: str, rc: int | None = None, torch: str | None = None) -> list[Failure]:
    """Every failure of a plain log: each distinct traceback (threads that printed at once, several
    races in one run), a native crash, a wrong result, a bare error line (a bug report's "Error
    logs", pytest's `E   ...` lines), or an all-thread dump of a hung process (py-spy's text or
    JSON, faulthandler's, or the harness's own `hang_dump.txt`); [] when nothing in it failed.
    GitHub issue text is read as is: code fences do not hide a traceback."""
    torch = torch or _torch_in(text) or installed_torch()
    stripped = text.lstrip()
    if stripped.startswith("[") and '"thread_name"' in text[:4000]:
        try:
            threads = hangs.parse_pyspy_json(json.loads(text))
        except ValueError:
            threads = ()
        if threads:
            return [_hang(threads, text, source, torch)]
    native_text = _native_part(text)
    found = [
        Failure(
            source=source,
            outcome=_outcome_of(f.signature),
            key=f.signature.key,
            summary=f.signature.summary,
            text=text,
            native=native_text,
            torch=torch,
            run=source,
            count=f.count,
        )
        for f in signature.run_failures(text)
    ]
    if found:
        return found
    sig = signature.crash_signature(text, rc=rc)
    if sig is None and re.search(r"^WRONG_RESULT:", text, re.M):
        sig = signature.wrong_result_signature(text, rc=rc)
    if sig is None and (bare := tracebacks.bare_exception(text)) is not None:
        sig = signature.exception_signature(bare)
    if sig is not None:
        return [
            Failure(
                source=source,
                outcome=_outcome_of(sig),
                key=sig.key,
                summary=sig.summary,
                text=text,
                native=native_text,
                torch=torch,
                run=source,
            )
        ]
    threads = hangs.parse_dump_text(text) or hangs.parse_rendered(text)
    if threads:
        return [_hang(threads, text, source, torch)]
    return []


def _outcome_of(sig: signature.Signature) -> str:
    return "ABORT" if sig.kind in ("fatal", "signal") else "WRONG_RESULT" if sig.kind == "wrong_result" else "CRASH"


_TORCH_LINE = re.compile(
    r'^torch (\d+\.\d+\.\d+\S*?),? |"torch": "(\d+\.\d+\.\d+[^"]*)"|'
    r"^PyTorch version: (\d+\.\d+\.\d+\S*)|^(?:\[pip3?\] )?torch[=]=(\d+\.\d+\.\d+\S*)|"
    r"^torch\s*(?:version)?\s*[:=]\s*(\d+\.\d+\.\d+\S*)",
    re.M | re.I,
)


def _torch_in(text: str) -> str | None:
    """The torch a log names (a trainer's stall dump header `torch X, Python Y`, its JSON events'
    `"torch": "X"`, collect_env's `PyTorch version: X` and `[pip3] torch==X`, a report's
    `torch: X`): a log read on another machine is judged on the torch it ran on."""
    m = _TORCH_LINE.search(text)
    return next((g for g in m.groups() if g), None) if m else None


def _hang(threads, text: str, source: str, torch: str | None) -> Failure:
    sig = signature.hang_signature(threads)
    kind = blocking.classify(threads, one_dump=True)
    return Failure(
        source=source,
        outcome="HANG",
        key=sig.key,
        summary=sig.summary,
        text=text,
        torch=torch,
        run=source,
        detail=f"dump; {kind.text()}" if kind else "",
    )


def _native_part(text: str) -> str:
    frames = native.native_stack(text)
    return native.render(frames) if frames else ""


def collect(targets: Sequence[str], *, stores: Sequence[Path] = (), torch: str | None = None) -> list[Failure]:
    """Failing runs named by the targets (see the module docstring)."""
    failures: list[Failure] = []
    for target in targets:
        path = Path(target)
        if path.is_file() and path.suffix != ".zip":
            failures += failures_in_text(
                path.read_text(encoding="utf-8", errors="replace"), source=str(path), torch=torch
            )
        elif path.is_dir() and (path / "trials.jsonl").is_file():
            failures += _from_store(path)
        elif path.is_dir() and (path / RESULT).is_file():
            failures += _from_folder(path)
        elif path.is_dir():
            runs = sorted((p for p in path.iterdir() if (p / RESULT).is_file()), key=_numeric)
            if not runs:
                raise DiagnoseError(f"{target}: no trial folders (result.json) and no trials.jsonl in it")
            for run in runs:
                failures += _from_folder(run)
        else:
            failures += _from_trial_id(target, stores)
    return failures


def _numeric(p: Path) -> tuple:
    return (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name)


def _from_folder(folder: Path) -> list[Failure]:
    try:
        record = TrialResult.from_json(json.loads((folder / RESULT).read_text()))
    except (ValueError, KeyError, TypeError) as e:
        raise DiagnoseError(f"{folder}/result.json: not a trial result: {e}") from None
    if record.outcome is Outcome.TIMEOUT:
        return [_timeout(record, folder)]
    if record.outcome is Outcome.HARNESS_ERROR and record.detail.startswith(HARNESS_DEFECT):
        return [_harness_defect(record, folder)]
    if not record.outcome.is_failure and record.outcome is not Outcome.OK:
        return []
    failures = failures_of(record, folder, every_thread=True)
    spec = folder / SPEC
    for failure in failures:
        failure.source = failure.run = str(folder)
    if spec.is_file():
        try:
            data = json.loads(spec.read_text())
            fixes = tuple(data.get("fixes") or ()) or tuple(
                f for f in str((data.get("env") or {}).get("HARNESS_FIXES", "")).split(",") if f and f != "none"
            )
            workload = data.get("workload") or {}
            command = tuple(workload.get("argv") or ()) if workload.get("kind") == "command" else ()
        except (ValueError, AttributeError):
            fixes, command = (), ()
        for failure in failures:
            failure.fixes = fixes or failure.fixes
            failure.command = command
    return failures


def _harness_defect(record: TrialResult, folder: Path) -> Failure:
    """A run the harness's own code failed (a fix's wrapper raised): said so, never matched as a race."""
    return Failure(
        source=str(folder),
        outcome="HARNESS_ERROR",
        key=None,
        summary=record.detail,
        text="",
        torch=record.torch_version,
        run=str(folder),
        detail=record.detail,
    )


def _timeout(record: TrialResult, folder: Path) -> Failure:
    """A run past its deadline: slow, not hung; its dump says where it was busy."""
    dump = folder / PYSPY
    threads = hangs.read_pyspy_json(dump) if dump.is_file() else ()
    key = signature.hang_signature(threads).key if threads else None
    return Failure(
        source=str(folder),
        outcome="TIMEOUT",
        key=key,
        summary=f"slow: {record.detail}",
        text=_read(folder, HANG_DUMP),
        torch=record.torch_version,
        run=str(folder),
        detail=record.detail,
    )


def _from_store(store_dir: Path) -> list[Failure]:
    try:
        records = Store(store_dir).load()
    except StoreError as e:
        raise DiagnoseError(str(e)) from None
    return from_records(records, store_dir)


def _from_trial_id(trial_id: str, stores: Sequence[Path]) -> list[Failure]:
    try:
        record, store_dir = find_trial(trial_id, with_retired(trial_stores_given(list(stores))))
    except TrialNotFound as e:
        raise DiagnoseError(f"{trial_id}: not a file, a folder or a stored trial ({e})") from None
    if not record.outcome.is_failure:
        raise DiagnoseError(f"{trial_id}: ended {record.outcome.name}, nothing to diagnose")
    return failures_of(record, Store(store_dir).artefacts_of(record), every_thread=True)


# -------------------------------------------------------------------------------------- output


def render(findings: Sequence[Finding], *, width: int = 3, brief: bool = False, deterministic: str = "") -> str:
    """Every finding; `brief` (under a matrix or stress table): the verdict, the fixes that held
    on the failure's torch and the repro, one line each. `deterministic`: why the caller found the
    failures deterministic (stress's stop rule); a failure no race names then reads
    `deterministic: <reason>`, never "possibly new"."""
    if not findings:
        return "diagnosis: no failing run"
    out = [summary_line(findings)]
    for f in findings:
        out += _brief(f, deterministic) if brief else _full(f, width, deterministic)
    if brief:
        out.append("  (python -m harness diagnose TRIAL_OR_FOLDER for the evidence and every fix)")
    return "\n".join(out)


def _head(f: Finding) -> str:
    outcome = "OK, but" if f.outcome == "OK" else f.outcome
    times = f" ({f.count} tracebacks)" if f.count > f.runs else ""
    return f"{f.runs} run{'s' if f.runs != 1 else ''}{times} {outcome}: {f.summary or f.key or f.detail or '?'}"


def _held_here(f: Finding) -> str:
    """The fixes that held on the failure's torch, each said for what it needs on this program."""
    held = [
        x.name + ("" if x.offered() else " (with an edit of the program)" if x.edit else " (not for this face)")
        for x in f.fixes
        if x.same_torch and x.held()
    ]
    return ", ".join(held) if held else "no measured fix"


def _brief(f: Finding, deterministic: str) -> list[str]:
    out = [f"  {clip(_head(f), 160)}", f"    {f.verdict(deterministic)}"]
    if f.race is not None:
        out.append(f"    held on this torch: {_held_here(f)}" + (f"; reproduce: {f.repros[0]}" if f.repros else ""))
    if f.try_fixes:
        out.append(f"    try on your program: {f.try_fixes}")
    elif f.change:
        out.append(f"    no --fix holds on your program as it is; change it: {f.change}")
    return out


def _full(f: Finding, width: int, deterministic: str) -> list[str]:
    out = [_head(f), f"  {f.verdict(deterministic)}" + (f" on torch {f.torch}" if f.torch else "")]
    out += [f"  also as: {face}" for face in f.faces]
    for m in f.matches[:width]:
        tag = "suspected" if m.suspected else m.kind
        out.append(f"  - {m.race} [{tag}, score {m.score:.1f}]: " + "; ".join(m.evidence))
    if f.fixes:
        out.append("  fixes measured against it (k = runs failing as this race):")
        out += [f"    {line.text()}" for line in f.fixes]
    out += [f"  {line}" for line in f.versions]
    out += [f"  reproduce: {c}" for c in f.repros]
    if f.try_fixes:
        out.append(f"  try the fixes on your program (no edit): {f.try_fixes}")
    elif f.change:
        out.append(f"  no --fix holds on your program as it is; change it: {f.change}")
    out += [f"  reported: {r}" for r in f.reports]
    if f.hint and f.hint not in f.change:
        out.append(f"  hint: {f.hint}")
    shown = ", ".join(f.sources[:3]) + (f" and {len(f.sources) - 3} more" if len(f.sources) > 3 else "")
    out.append(f"  runs: {shown}")
    return out


def from_records(records: Iterable[TrialResult], store_dir: Path) -> list[Failure]:
    """The failing trials of a matrix run, with their artefacts."""
    store = Store(store_dir)
    return [
        f
        for r in records
        if r.replay_of is None and r.outcome.is_failure and r.outcome.counts_as_trial
        for f in failures_of(r, store.artefacts_of(r), every_thread=True)
    ]


def summary_line(findings: Sequence[Finding]) -> str:
    """How many failing runs showed a catalogued race, then each race's runs and tracebacks (a run
    showing two races counts under both), and the runs that exited OK with a race's face."""
    failing = [f for f in findings if f.outcome != "OK"]
    runs = set().union(*(f.sources for f in failing)) if failing else set()
    known = set().union(*(f.sources for f in failing if f.race is not None)) if failing else set()
    line = f"diagnosis: {len(known)} of {len(runs)} failing runs matched a catalogued race"
    per: dict[str, list] = {}
    for f in findings:
        if f.race is not None:
            entry = per.setdefault(f"{f.race}{' at exit 0' if f.outcome == 'OK' else ''}", [set(), 0])
            entry[0].update(f.sources)
            entry[1] += f.count
    if per:
        line += "; " + ", ".join(
            f"{race} in {len(r)} run{'s' if len(r) != 1 else ''}" + (f" ({n} tracebacks)" if n > len(r) else "")
            for race, (r, n) in sorted(per.items(), key=lambda kv: -len(kv[1][0]))
        )
    return line


def _fixes_of(record: TrialResult) -> tuple[str, ...]:
    """The registry fixes a stored trial ran (its record's field; `raw`, `eager` and
    `no-cudagraphs` are not fixes)."""
    return tuple(f for f in record.fixes or () if f in FIXES)
