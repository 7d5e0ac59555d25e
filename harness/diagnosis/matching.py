"""Matching one failure against the catalogue: the race its summary names, races suspected behind a
generic family, a race's warning-level face in a run that did not fail, and whether the program
fails that way on its own (one thread, a measured window that never opened).

A race whose messages others print as well (`needs_context`: F14's recompile limit) is named by
them only where the run shows its precondition (`context`: a thread that set the limit); a failure
the catalogue knows is no race (a recompile limit reached, a test's own state) is named as such,
so that it never reads as a race."""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.diagnosis.catalogue import NOT_RACE_KINDS, Catalogue, Race, RecordSource, count, load, major_minor
from harness.diagnosis.failure import Failure
from harness.trial.outcome import SHOWN_AT_EXIT_0

SUMMARY_SCORE = 1.0


MESSAGE_SCORE = 0.5


NATIVE_SCORE = 0.5


SUSPECT_SCORE = 0.4


WARNING_SCORE = 0.8


CONTEXT_SCORE = 0.3
"""A needs_context race's precondition shown in the run's text or configs (a thread set the limit)."""


WINDOW_SCORE = 0.2
"""The same shown only by a measured window: it opens in many runs the race never failed."""


CODE_SCORE = 0.4
"""A test's own state read from its code, where nothing else names the failure."""


NATIVE_CRASH = "native-crash"
"""The face of a native crash (ABORT) that no family names (a C++ abort, a signal elsewhere)."""


WINDOWS = "windows opened: "
"""How the run's measured exposure windows read to a race's `context` (`windows opened: F10=3`)."""


@dataclass(kw_only=True, slots=True)
class Match:
    race: str
    title: str
    kind: str
    score: float
    evidence: list[str]
    suspected: bool = False


def match(
    failure: Failure, catalogue: Catalogue, records_of: RecordSource, named: frozenset[str] = frozenset()
) -> list[Match]:
    """Catalogue races that fit the failure, best first: the race its summary names (the
    families' first-match rule), else races suspected behind its generic family. `named`: races
    another failure of the same run names by its own summary; the run's output shows their
    messages, which say nothing of this failure."""
    if failure.outcome == "OK":
        return warning_faces(failure, catalogue)
    if failure.outcome == "TIMEOUT":
        return []
    family = catalogue.family(failure.summary)
    matches: list[Match] = []
    if family not in ("other", "?"):
        matches = _by_summary(family, failure, catalogue)
        if matches and matches[0].race != family:
            return matches
    if family in ("other", "?") or catalogue.race(family).kind == "generic":
        matches[:0] = _suspects(family, failure, catalogue, records_of)
        # A native crash whose frames are a race's own (R5's cache-entry insertion) is that race,
        # wherever the Python frame of the crash happened to be.
        matches[:0] = _by_native(failure, catalogue)
        if family in ("other", "?"):
            matches += [m for m in _by_text(failure, catalogue) if m.race not in named]
        if failure.detail.startswith(SHOWN_AT_EXIT_0):
            # Counted by a face at exit 0: a warning with its precondition (F14's) is a face too.
            seen = {m.race for m in matches} | named
            matches += [m for m in warning_faces(failure, catalogue) if m.race not in seen]
    if not matches and family in ("other", "?"):
        matches = _by_code(failure, catalogue)
    return matches


def _by_summary(family: str, failure: Failure, catalogue: Catalogue) -> list[Match]:
    """The race the summary names; another race where that one's native frames are missing and
    the other's are there, or where it is no race by itself and a race claims it."""
    race = catalogue.race(family)
    if race.native and failure.native and first_hit(race.native, failure.native) is None:
        # The message is the race's, its own native frames are not there, another's are: that
        # other (a daemon thread ended at exit prints stash-exit-finalize's terminate message).
        other = [m for m in _by_native(failure, catalogue) if m.race != race.id]
        if other:
            return other
    ev = [f"signature summary matches /{_which(race.summaries, failure.summary or '')}/"]
    score = SUMMARY_SCORE + _extra(race, failure, ev)
    matches = [Match(race=race.id, title=race.title, kind=race.kind, score=score, evidence=ev)]
    if race.kind == "not-a-race":
        # No race by itself (a recompile limit reached): a race whose precondition the run shows
        # (F14's limit set in a thread, F10's concurrent compiles) claims it.
        matches[:0] = _claims(family, failure, catalogue)
    return matches


def warning_faces(failure: Failure, catalogue: Catalogue) -> list[Match]:
    """A run that did not fail but whose output shows a race: its warning-level face (F10's
    recompile limit: those threads ran eagerly) or a race's message logged and carried on."""
    out = []
    for race in catalogue.races:
        if race.kind == "generic" or race.kind in NOT_RACE_KINDS:
            continue
        hit = first_hit(race.warnings, failure.text) or first_hit(race.messages, failure.text)
        if hit is None:
            continue
        evidence = [f"at {failure.detail or 'exit 0'}, the output shows {hit!r}"]
        score = WARNING_SCORE
        if race.needs_context:
            # A line other code prints as well (F14's default recompile limit) names the race only
            # where the run shows its precondition too (a thread set the limit); alone, nothing.
            extra = _precondition(race, failure, evidence, "that line")
            if extra is None:
                continue
            score += extra
        out.append(Match(race=race.id, title=race.title, kind=race.kind, score=score, evidence=evidence))
    out.sort(key=lambda m: -m.score)
    return out


def run_context(failure: Failure) -> str:
    """What a race's `context` reads: the failure's context (output, fixes, configs set in threads)
    and the exposure windows measured open in the run."""
    opened = " ".join(f"{k}={v}" for k, v in sorted((failure.exposures or {}).items()) if v)
    return failure.context() + (f"\n{WINDOWS}{opened}" if opened else "")


def _precondition(race: Race, failure: Failure, evidence: list[str], what: str) -> float | None:
    """The score a needs_context race's precondition adds where the run shows it (its evidence
    appended), None where it does not: then its message names nothing."""
    shown = first_hit(race.context, run_context(failure))
    if shown is None:
        return None
    evidence += [f"not shown by {what} alone: {race.needs_context}", f"the run shows {shown!r}"]
    return WINDOW_SCORE if shown.startswith(WINDOWS) else CONTEXT_SCORE


def warning_notes(failure: Failure, catalogue: Catalogue) -> str:
    """The notes an OK run's unsure warnings get where no race is named by them (F14's recompile
    limit hit with no thread that set it: `recompile limit hit (not a race by itself)`)."""
    notes = [
        race.warnings_alone
        for race in catalogue.races
        if race.warnings_alone
        and first_hit(race.warnings, failure.text) is not None
        and first_hit(race.context, failure.context()) is None
    ]
    return "; ".join(dict.fromkeys(notes))


def faces(text: str, catalogue: Catalogue | None = None, *, config: str = "") -> list[str]:
    """`RACE (title)` for each race an OK run's output shows (stress keeps such runs); `config`: the
    configs the program set, by thread (`trial_failures.config_sets`), F14's precondition."""
    catalogue = catalogue or load()
    ok = Failure(source="", outcome="OK", key=None, summary=None, text=text, config_threads=config)
    return [f"{m.race} ({m.title})" + (", suspected" if m.suspected else "") for m in warning_faces(ok, catalogue)]


def _which(patterns: Sequence[str], text: str) -> str:
    """The first pattern that matches (evidence text)."""
    return next((p for p in patterns if re.search(p, text)), patterns[0])


def first_hit(patterns: Sequence[str], text: str) -> str | None:
    """The text the first matching pattern found, or None."""
    return next((m.group(0) for p in patterns if (m := re.search(p, text))), None)


def _extra(race: Race, failure: Failure, ev: list[str]) -> float:
    score = 0.0
    if (hit := first_hit(race.messages, failure.text)) is not None:
        shown = [f"message {hit!r}"]
        extra = _precondition(race, failure, shown, "that message") if race.needs_context else 0.0
        if extra is not None:
            ev += shown
            score += MESSAGE_SCORE + extra
    if (hit := first_hit(race.native, failure.native)) is not None:
        ev.append(f"native frame {hit!r}")
        score += NATIVE_SCORE
    return score


def _suspects(family: str, failure: Failure, catalogue: Catalogue, records_of: RecordSource) -> list[Match]:
    """Races whose `faces` include this generic family, whose `context` is in the run, on a torch
    where their repro reproduced."""
    out = []
    context = run_context(failure)
    if failure.outcome == "ABORT" and family in ("other", "?"):
        family = NATIVE_CRASH
    for race in catalogue.races:
        if family not in race.faces:
            continue
        hit = first_hit(race.context, context)
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
        hit = first_hit(race.native, failure.native)
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


def _claims(family: str, failure: Failure, catalogue: Catalogue) -> list[Match]:
    """Races whose message and precondition the run shows, claiming a failure that is no race by
    itself (`family`): the best first."""
    out = []
    for m in _by_text(failure, catalogue):
        if m.kind == "race" and catalogue.race(m.race).needs_context:
            ev = [f"a {family} failure in a run that shows the race's precondition", *m.evidence]
            out.append(dataclasses.replace(m, score=m.score + SUMMARY_SCORE, evidence=ev))
    return out


def _by_code(failure: Failure, catalogue: Catalogue) -> list[Match]:
    """A test failing by its own state, read from the code of its functions in the traceback
    (`global COUNT`, a redirect_stdout): what nothing else names."""
    code = test_code(failure.text)
    out = []
    for race in catalogue.races if code else ():
        hit = first_hit(race.context, code) if race.kind == "own-state" else None
        if hit is not None:
            ev = [f"the failing test's code shows {hit.strip()!r}"]
            out.append(Match(race=race.id, title=race.title, kind=race.kind, score=CODE_SCORE, evidence=ev))
    return out


FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.M)
LIBRARY = re.compile(r"[/\\](?:site-packages|dist-packages|lib[/\\]python3[.\d]*)[/\\]|^<")
"""A frame in an installed package or the standard library: not the test's own code."""


def test_code(text: str) -> str:
    """The source of the failing test's own functions: the last traceback's frames from the
    innermost `test*` function on, outside installed packages; '' where there is none (not a
    test's failure, or its files are not here)."""
    frames = FRAME.findall(text)
    start = max((i for i, f in enumerate(frames) if f[2].startswith("test")), default=None)
    if start is None:
        return ""
    seen = dict.fromkeys((path, int(line), name) for path, line, name in frames[start:] if not LIBRARY.search(path))
    return "\n".join(code for code in (_function_source(*f) for f in seen) if code)


def _function_source(path: str, line: int, name: str) -> str:
    """The source of the function `name` holding `line` in the file at `path`; '' if not found."""
    parsed = _parsed(path)
    if parsed is None:
        return ""
    source, tree = parsed
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return ast.get_source_segment(source, node) or ""
    return ""


@functools.lru_cache(maxsize=64)
def _parsed(path: str) -> tuple[str, ast.Module] | None:
    try:
        source = Path(path).read_text(encoding="utf-8")
        return source, ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None


def on_its_own(failure: Failure, race: Race) -> str:
    """Why a failure showing a race's message is the program's own doing, not that race: it ran
    with one thread (the race needs two), or the race's window was measured and never opened."""
    if race.kind != "race" or failure.process:
        # A child process's threads and windows are not the first process's, which alone are counted.
        return ""
    if failure.threads_started == 0 and _main_thread_only(failure):
        return "one thread"
    if race.exposure and race.window_clears and (failure.exposures or {}).get(race.id) == 0:
        return f"{race.id}'s window ({race.exposure}) was measured and never opened in the run"
    return ""


def _main_thread_only(failure: Failure) -> bool:
    """Whether the failure's text shows the main thread only (no other thread printed a failure)."""
    if any(t not in ("", "MainThread") for t in failure.threads):
        return False
    return re.search(r"^Exception in thread (?!MainThread\b)", failure.text, re.M) is None
