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

The pieces: harness.diagnosis.targets and log_text read the inputs, trial_failures a stored run's
failures, matching names each failure's races, fix_advice and race_evidence say what to do about a
named race, finding holds a finding and its verdict line, rendering the text; this module groups
the failures into findings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.diagnosis.catalogue import Catalogue, Race, RecordSource, load
from harness.diagnosis.failure import DiagnoseError, Failure
from harness.diagnosis.finding import Finding
from harness.diagnosis.fix_advice import FixLine, change_text, companions, fix_lines, try_fixes_command
from harness.diagnosis.log_text import failures_in_text, from_text
from harness.diagnosis.matching import Match, faces, match, on_its_own, warning_notes
from harness.diagnosis.race_evidence import repro_commands, version_lines
from harness.diagnosis.rendering import render, summary_line
from harness.diagnosis.side_by_side import StressRecord, arms_verdict, held, tried
from harness.diagnosis.targets import collect
from harness.diagnosis.trial_failures import failures_of, from_record, from_records
from harness.trial import signature

__all__ = [
    "DiagnoseError",
    "Failure",
    "Finding",
    "FixLine",
    "Match",
    "RecordSource",
    "collect",
    "diagnose",
    "faces",
    "failures_in_text",
    "failures_of",
    "fix_lines",
    "from_record",
    "from_records",
    "from_text",
    "load",
    "render",
    "report",
    "signature",
    "summary_line",
    "try_fixes_command",
    "version_lines",
]
"""What callers use of the diagnosis, from this one module."""


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
    note = warning_notes(f, catalogue) if f.outcome == "OK" and not matches else ""
    if f.outcome == "OK" and not matches and not note:
        return None
    top = matches[0] if matches else None
    own = on_its_own(f, catalogue.race(top.race)) if top is not None and top.kind != "generic" else ""
    return _Seen(f, matches, own, note)


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
    # A fix reaches a child process only with --children: never offer an arm that cannot reach it.
    options = first.options + (("--children",) if first.process and "--children" not in first.options else ())
    finding.try_fixes = try_fixes_command(
        finding.fixes, first.command, needs=companions(catalogue, records_of), options=options
    )
    if first.process:
        finding.measured = f"it failed in a child process of the run, {first.process}: --children puts the fixes there"
    finding.reports = list(race.reports)
    if not finding.try_fixes:
        finding.change = change_text(race, finding.fixes)


def report(
    targets: Sequence[str], *, stores: Sequence = (), torch: str | None = None, brief: bool = False
) -> tuple[str, list[Finding]]:
    """The verdict on the targets, as text, and its findings: one function for `stress`'s summary
    and `diagnose`, so the same folder reads the same in both. A stress folder adds what its
    record holds (harness.diagnosis.side_by_side): the stop's verdict, and the fixes' verdict from
    the user's own side by side, which replaces the catalogue's advice where it speaks."""
    record = StressRecord.read(Path(targets[0])) if len(targets) == 1 and Path(targets[0]).is_dir() else None
    findings = diagnose(collect(targets, stores=stores, torch=torch))
    deterministic = record.deterministic.split(":", 1)[0] if record else ""
    if record is not None:
        _with_side_by_side(findings, record)
    text = render(findings, brief=brief, deterministic=deterministic)
    lines = arms_verdict(record.arms) if record is not None else []
    return "\n".join([*lines, text]), findings


def _with_side_by_side(findings: Sequence[Finding], record: StressRecord) -> None:
    """Each race's advice after the user's own fix sets: what held there is said, and what is
    offered next leaves out the sets already tried."""
    kept, done = held(record.arms), frozenset(tried(record.arms))
    catalogue = load()
    needs = companions(catalogue, RecordSource()) if done and not kept else {}
    for f in findings:
        if f.race is None:
            continue
        if kept:
            f.try_fixes, f.change = "", ""
            f.measured = f"held in your runs: {', '.join(kept)}"
            continue
        if done:
            f.try_fixes = try_fixes_command(f.fixes, record.command, needs=needs, options=record.options, tried=done)
            f.measured = f"tried in your runs and did not hold: {', '.join(sorted(done))}"
            if not f.try_fixes:
                f.change = change_text(catalogue.race(f.race), f.fixes)


def folder_races(folder: str | Path) -> tuple[list[str], list[str]]:
    """The catalogued races a run's folder shows, by id, once each in order; and apart, those whose
    message showed though the diagnosis found it the program's own doing (one thread). stress and
    hunt name a failing run's races here."""
    try:
        findings = diagnose(collect([str(folder)]))
    except DiagnoseError:
        return [], []
    races = [f.race for f in findings if f.race is not None and not f.own]
    own = [f.matches[0].race for f in findings if f.own and f.matches]
    return list(dict.fromkeys(races)), list(dict.fromkeys(own))
