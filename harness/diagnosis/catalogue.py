"""The catalogue of known races (`races.toml` beside this module), loaded and validated.

One file holds what every part of the toolkit knows about a failure mode: how to recognise it
(signature patterns, message templates, native frames), its repro, its upstream issues, where it
was seen per torch version and which fixes held. The data stays data (TOML, no code); counts are
never typed into it but read from the stores it names (`FixEvidence.count`), so a number quoted
by `harness diagnose` is what the store says today. Loading validates everything once (a bad
regex, an unknown fix name or a missing store is an error at load, not a wrong match later).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.faults.exposure import PROBES
from harness.runtime.errors import UserInputError
from harness.stores.store import Store
from harness.trial.outcome import TrialResult

CATALOGUE_PATH = Path(__file__).with_name("races.toml")
EVIDENCE_PATH = Path(__file__).with_name("evidence.json")
"""The counts the catalogue cites, for an installation without the stores (harness.diagnosis.evidence)."""
ROOT = Path(__file__).resolve().parents[2]
"""The checkout: store paths in the catalogue are relative to it."""
KINDS = ("race", "compiler-bug", "own-state", "not-a-race", "generic")
NOT_RACE_KINDS = ("own-state", "not-a-race")
"""Failures the catalogue knows that are no race: a test's own state shared by its threads (a
swapped sys.stdout), a limit reached (the recompile limit). Named so that they are not read as
races; never a face of a race at exit 0."""
NEVER = "(?!)"
"""The summary pattern of an entry named only by its context (a test's code): it matches nothing."""
NATIVE_CRASH = r"(?:Segmentation fault|Floating point exception|Aborted|Bus error|Illegal instruction)"
"""How a native crash's signature summary begins (harness.trial.signature: `<signal> at <frame>`)."""
FIX_WINDOWS = ("opens", "shut")
REPRO_WORKLOAD = re.compile(r"(r\d\d)(?:$|[-_:])")
"""A workload named after a repro id (cpu-quick's `r06`, a spec's `r06-inductor`)."""


class CatalogueError(UserInputError):
    """The catalogue file is malformed: one line, naming the entry."""


@dataclass(frozen=True, slots=True)
class Count:
    """Failing trials of one race among the counted trials of some cells."""

    k: int
    """Trials that failed as this race."""
    n: int
    """Counted trials (no replays, timeouts, out-of-memory or harness errors)."""
    failed: int
    """Trials that failed in any way (a fix that holds for this race may fail another way)."""
    torch: tuple[str, ...]
    """torch versions the trials ran on."""

    def text(self) -> str:
        other = f", {self.failed - self.k} failed otherwise" if self.failed > self.k else ""
        return f"{self.k}/{self.n}{other}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """Store cells (counted on demand) or a note; a fix's or a version's backing."""

    store: str | None = None
    cells: tuple[str, ...] = ()
    note: str = ""

    def where(self) -> str:
        cells = ", ".join(self.cells)
        return f"{self.store} {cells}" if self.store else self.note


@dataclass(frozen=True, slots=True)
class FixEvidence(Evidence):
    name: str = ""
    """A registry fix or `+` combination (harness.runtime.fixes.FIXES), or a script argument (`--x`)."""
    edit: str = ""
    """What the measured program did that `--fix` alone cannot do to a user's program (r27's mutator
    takes the lock): the count holds only with that edit, so the fix is never offered as a no-edit
    `--fix`. Empty: measured on a program the fix reaches unedited."""
    leaves: tuple[str, ...] = ()
    """Regexes over a failure's output: faces of the race this fix does not remove (F14's
    nested-fx-fallback sets one override, not the recompile limit); not offered where one shows."""


@dataclass(frozen=True, slots=True)
class VersionEvidence(Evidence):
    torch: str = ""
    """major.minor."""
    fix_cells: tuple[str, ...] = ()
    """The same store's cells of the race's fixes on this torch (any failure counts against them)."""


@dataclass(frozen=True, slots=True)
class Race:
    id: str
    title: str
    kind: str
    needs_cuda: bool
    summary: tuple[str, ...]
    messages: tuple[str, ...] = ()
    native: tuple[str, ...] = ()
    probe: str | None = None
    exposure: str | None = None
    """harness.faults.exposure probe that counts this race's window (its key: this race's id)."""
    window_clears: bool = True
    """Whether a run whose window was measured and never opened is cleared of this race (the
    program's own failure); false where the race was seen failing with its window shut."""
    repros: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    """Other ids the docs use for this race (R1/R2 for F2's faces, F8 for G2's cause, ...)."""
    hint: str = ""
    faces: tuple[str, ...] = ()
    """Generic families (segv, ...) this race may show as, when `context` matches the run."""
    context: tuple[str, ...] = ()
    """Regexes over the run (its output, fixes, configs set in threads, windows opened): the
    precondition a face (`faces`) or a message (`needs_context`) needs; for an own-state entry,
    over the failing test's own code (`global COUNT`, a redirect_stdout)."""
    reports: tuple[str, ...] = ()
    """Public reports of this failure (`project#N (year): what reproduced where`), from the corpus."""
    warnings: tuple[str, ...] = ()
    """Regexes over the output of a run that did not fail: the race's face at warning level (a
    recompile limit hit, an eager fallback), a finding even at exit 0."""
    needs_context: str = ""
    """Why the race's `messages` and `warnings` alone do not show it (what else prints the same
    line: F14's recompile limit is hit by programs that never set one): a hit names the race only
    where `context` shows the race's precondition in the run (with this as its evidence); without
    it, not at all. Empty: the messages are the race's own. Its summary patterns are its own still."""
    warnings_alone: str = ""
    """The note an OK run's warning gets where no race's context claims it (`recompile limit hit
    (not a race by itself)`); empty: nothing is said."""
    crash_sites: tuple[str, ...] = ()
    """Regexes of the Python frames where the race's native crash may land (the crashing thread's
    innermost frame): each is a summary pattern `<signal> at <site>`, so that any crash site of the
    family matches, whichever one a run happened to crash in."""
    fixes: tuple[FixEvidence, ...] = ()
    versions: tuple[VersionEvidence, ...] = ()
    summary_re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grouped = "|".join(f"(?:{p})" for p in self.summaries) or NEVER
        object.__setattr__(self, "summary_re", re.compile(grouped))

    @property
    def summaries(self) -> tuple[str, ...]:
        """The summary patterns and one per crash site (a native crash landing there)."""
        return self.summary + tuple(f"{NATIVE_CRASH} at (?:{site})" for site in self.crash_sites)

    @property
    def pattern(self) -> str:
        """The summary patterns as one regex (what harness.diagnosis.families matches); one that
        matches nothing for an entry named only by its context."""
        return "|".join(self.summaries) or NEVER


@dataclass(frozen=True, slots=True)
class Repro:
    """One race-suite row (tests/race/racecheck.Race's fields, the store's counts)."""

    id: str
    script: str
    device: str
    family: str
    """Regex with `{RACE}` placeholders expanded to that race's summary patterns."""
    recorded: tuple[int, int]
    torch: str
    store: str
    plan: str | None = None
    recorded_plain: tuple[int, int] | None = None
    expect: str = "reproduces"
    fix: str | None = None
    args: tuple[str, ...] = ()
    """Script arguments of every trial: the store workload's argv after the script (r26's widening)."""
    fix_args: tuple[str, ...] = ()
    fix_recorded: tuple[int, int] | None = None
    fix_trials: int = 29
    repro_cap: int | None = None
    native: str | None = None
    on_torch: str | None = None
    """major.minor where this row replaces the same id's row (a record for another torch)."""
    fix_source: str = ""
    fix_window: str | None = None
    """What the fix does to its race's exposure window (FIX_WINDOWS): `opens` (the window opens
    under the fix, which survives it or runs the call eagerly) or `shut` (the fix keeps it shut).
    None: not stated (not measured on the row's device yet); the suite's gate then says so."""
    fix_exposed: int | None = None
    """`opens`: the window must open in at least this many of fix_trials; `shut`: in each of this
    many raw trials of the same seeds (the control that the plan opens it at all)."""


@dataclass(frozen=True, slots=True)
class Catalogue:
    races: tuple[Race, ...]
    repros: tuple[Repro, ...]

    def race(self, race_id: str) -> Race:
        for r in self.races:
            if r.id == race_id:
                return r
        raise KeyError(race_id)

    def family(self, summary: str | None) -> str:
        """The first race whose summary patterns match; `other` for none, `?` without a summary."""
        if not summary:
            return "?"
        # A failure's own part first: `...; then <native crash>` is its aftermath (signature v5),
        # and a daemon thread's std::terminate at exit must not rename an R4 crash.
        head = summary.split("; then ", 1)[0]
        for text in dict.fromkeys((head, summary)):
            found = next((r.id for r in self.races if r.summary_re.search(text)), None)
            if found is not None:
                return found
        return "other"

    def races_of_repro(self, repro_id: str) -> tuple[Race, ...]:
        return tuple(r for r in self.races if repro_id in r.repros)

    def windows_of(self, workload: str) -> tuple[str, ...] | None:
        """The exposure windows a workload's cells are judged by: a repro's (a workload named
        `rNN` or `rNN-...`) races with a probe, () where none has one; None for any other
        workload (the trainer, a user's program), judged by every window it measured."""
        m = REPRO_WORKLOAD.match(workload)
        races = self.races_of_repro(m.group(1)) if m else ()
        if not races:
            return None
        return tuple(r.id for r in races if r.exposure is not None)


def _strs(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogueError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _pair(value: object, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise CatalogueError(f"{where}: expected [k, n], got {value!r}")
    return value[0], value[1]


def _evidence(cls, raw: dict, where: str, **extra):
    store = raw.get("store")
    cells = _strs(raw, "cells", where)
    if (store is None) != (not cells):
        raise CatalogueError(f"{where}: a store needs cells and cells need a store")
    if store is None and not raw.get("note"):
        raise CatalogueError(f"{where}: neither store cells nor a note")
    return cls(store=store, cells=cells, note=raw.get("note", ""), **extra)


def _fix_cells(raw: dict, where: str) -> tuple[str, ...]:
    cells = _strs(raw, "fix_cells", where)
    if cells and raw.get("store") is None:
        raise CatalogueError(f"{where}: fix_cells need a store")
    unknown = set(raw) - {"torch", "store", "cells", "fix_cells", "note"}
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    return cells


def _fix(raw: dict, where: str) -> FixEvidence:
    unknown = set(raw) - {"name", "store", "cells", "note", "edit", "leaves"}
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    for p in _strs(raw, "leaves", where):
        try:
            re.compile(p)
        except re.error as e:
            raise CatalogueError(f"{where}: bad leaves regex {p!r}: {e}") from None
    edit = raw.get("edit", "")
    if not isinstance(edit, str):
        raise CatalogueError(f"{where}: edit must be a string")
    return _evidence(FixEvidence, raw, where, name=raw.get("name", ""), edit=edit, leaves=_strs(raw, "leaves", where))


RACE_LISTS = (
    "summary",
    "messages",
    "native",
    "repros",
    "upstream",
    "aliases",
    "faces",
    "context",
    "warnings",
    "crash_sites",
    "reports",
)
"""A race's keys that hold a list of strings."""
RACE_KEYS = frozenset(
    (
        *RACE_LISTS,
        "id",
        "title",
        "kind",
        "needs_cuda",
        "probe",
        "exposure",
        "window_clears",
        "hint",
        "fixes",
        "versions",
        "needs_context",
        "warnings_alone",
    )
)
REPRO_KEYS = frozenset(
    (
        "id",
        "script",
        "device",
        "family",
        "recorded",
        "torch",
        "store",
        "plan",
        "recorded_plain",
        "expect",
        "fix",
        "args",
        "fix_args",
        "fix_recorded",
        "fix_trials",
        "repro_cap",
        "native",
        "on_torch",
        "fix_source",
        "fix_window",
        "fix_exposed",
    )
)


def _race(raw: dict) -> Race:
    where = f"race {raw.get('id', '?')}"
    _check_race(raw, where)
    fixes = tuple(_fix(f, f"{where} fix {f.get('name', '?')}") for f in raw.get("fixes", []))
    versions = tuple(_version(v, f"{where} torch {v.get('torch', '?')}") for v in raw.get("versions", []))
    return Race(
        id=raw["id"],
        title=raw["title"],
        kind=raw["kind"],
        needs_cuda=bool(raw.get("needs_cuda")),
        probe=raw.get("probe"),
        exposure=raw.get("exposure"),
        window_clears=bool(raw.get("window_clears", True)),
        hint=raw.get("hint", ""),
        needs_context=raw.get("needs_context", ""),
        warnings_alone=raw.get("warnings_alone", ""),
        fixes=fixes,
        versions=versions,
        **{key: _strs(raw, key, where) for key in RACE_LISTS},
    )


def _check_race(raw: dict, where: str) -> None:
    """A race entry's keys, kind, regexes and exposure probe, before any of it is read."""
    unknown = set(raw) - RACE_KEYS
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    if raw.get("kind") not in KINDS:
        raise CatalogueError(f"{where}: kind must be one of {KINDS}")
    for key in ("summary", "messages", "native", "context", "warnings", "crash_sites"):
        for p in _strs(raw, key, where):
            _regex(p, f"{where}: bad {key} regex {p!r}")
    if not raw.get("summary") and not raw.get("crash_sites") and not _named_by_context(raw):
        raise CatalogueError(f"{where}: no summary pattern")
    if raw.get("needs_context") and not raw.get("context"):
        raise CatalogueError(f"{where}: needs_context without a context to show it")
    _check_exposure(raw.get("exposure"), raw.get("id"), where)


def _named_by_context(raw: dict) -> bool:
    """An entry that is no race may be named by its context alone (a test's code: `global X`)."""
    return raw.get("kind") in NOT_RACE_KINDS and bool(raw.get("context"))


def _regex(pattern: str, what: str) -> None:
    try:
        re.compile(pattern)
    except re.error as e:
        raise CatalogueError(f"{what}: {e}") from None


def _check_exposure(exposure: str | None, race_id: str | None, where: str) -> None:
    """The race's exposure probe exists and counts this race's window."""
    if exposure is None:
        return
    probe = PROBES.get(exposure)
    if probe is None:
        raise CatalogueError(
            f"{where}: unknown exposure probe {exposure!r} (harness.faults.exposure.PROBES: {', '.join(PROBES)})"
        )
    if probe.window != race_id:
        raise CatalogueError(f"{where}: exposure probe {exposure!r} counts window {probe.window!r}, not this race")


def _version(raw: dict, where: str) -> VersionEvidence:
    return _evidence(VersionEvidence, raw, where, torch=raw.get("torch", ""), fix_cells=_fix_cells(raw, where))


def _repro(raw: dict, races: dict[str, Race]) -> Repro:
    where = f"repro {raw.get('id', '?')}"
    family = _repro_family(raw.get("family", ""), races, where)
    if set(raw) - REPRO_KEYS:
        raise CatalogueError(f"{where}: unknown keys {sorted(set(raw) - REPRO_KEYS)}")
    _check_fix_window(raw.get("fix_window"), raw.get("fix_exposed"), where)
    return Repro(
        id=raw["id"],
        script=raw["script"],
        device=raw["device"],
        family=family,
        recorded=_pair(raw["recorded"], where),
        torch=raw["torch"],
        store=raw["store"],
        plan=raw.get("plan"),
        recorded_plain=_pair(raw.get("recorded_plain"), where),
        expect=raw.get("expect", "reproduces"),
        fix=raw.get("fix"),
        args=_strs(raw, "args", where),
        fix_args=_strs(raw, "fix_args", where),
        fix_recorded=_pair(raw.get("fix_recorded"), where),
        fix_trials=raw.get("fix_trials", 29),
        repro_cap=raw.get("repro_cap"),
        native=raw.get("native"),
        on_torch=raw.get("on_torch"),
        fix_source=raw.get("fix_source", ""),
        fix_window=raw.get("fix_window"),
        fix_exposed=raw.get("fix_exposed"),
    )


def _repro_family(family: str, races: dict[str, Race], where: str) -> str:
    """The repro's family regex with each `{race}` replaced by that race's pattern."""

    def expand(m: re.Match) -> str:
        if m.group(1) not in races:
            raise CatalogueError(f"{where}: family names unknown race {m.group(1)!r}")
        return races[m.group(1)].pattern

    family = re.sub(r"\{([\w-]+)\}", expand, family)
    _regex(family, f"{where}: bad family regex")
    return family


def _check_fix_window(fix_window: object, fix_exposed: object, where: str) -> None:
    if (fix_window is None) != (fix_exposed is None):
        raise CatalogueError(f"{where}: fix_window and fix_exposed go together")
    if fix_window is not None and fix_window not in FIX_WINDOWS:
        raise CatalogueError(f"{where}: fix_window must be one of {FIX_WINDOWS}")
    if fix_exposed is not None and not (isinstance(fix_exposed, int) and fix_exposed >= 1):
        raise CatalogueError(f"{where}: fix_exposed must be an int >= 1")


def parse(text: str) -> Catalogue:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogueError(f"catalogue: {e}") from None
    races = tuple(_race(r) for r in data.get("race", []))
    ids = [r.id for r in races]
    if len(set(ids)) != len(ids):
        raise CatalogueError(f"catalogue: duplicate race ids {sorted({i for i in ids if ids.count(i) > 1})}")
    by_id = {r.id: r for r in races}
    for r in races:
        bad = [f for f in r.faces if f not in ("other", "native-crash") and by_id.get(f, r).kind != "generic"]
        if bad:
            raise CatalogueError(f"race {r.id}: faces must be generic races, `other` or `native-crash`, not {bad}")
    repros = tuple(_repro(r, by_id) for r in data.get("repro", []))
    return Catalogue(races=races, repros=repros)


@functools.cache
def load(path: Path = CATALOGUE_PATH) -> Catalogue:
    return parse(path.read_text())


def count(evidence: Evidence, race: Race, records_of: RecordSource) -> Count | None:
    """k/n of `race` over the evidence's cells (None for a note). Counted as the matrix tables
    count: no replays, only trials that count (not timeouts, out-of-memory or harness errors)."""
    if evidence.store is None:
        return None
    exists = getattr(records_of, "exists", None)
    if exists is not None and not exists(evidence.store):
        # An installed package has no results/: the counts it ships (harness.diagnosis.evidence).
        return shipped().get(evidence_key(evidence, race), Count(k=0, n=0, failed=0, torch=()))
    k = n = failed = 0
    torches: set[str] = set()
    for r in records_of(evidence.store):
        if r.replay_of is not None or not r.outcome.counts_as_trial:
            continue
        if not any(fnmatch.fnmatchcase(r.cell, g) for g in evidence.cells):
            continue
        n += 1
        torches.add(r.torch_version or "?")
        if r.outcome.is_failure:
            failed += 1
            k += race.summary_re.search(r.signature_summary or "") is not None
    return Count(k=k, n=n, failed=failed, torch=tuple(sorted(torches)))


def evidence_key(evidence: Evidence, race: Race) -> str:
    return f"{race.id}|{evidence.store}|{','.join(evidence.cells)}"


@functools.cache
def shipped(path: Path = EVIDENCE_PATH) -> dict[str, Count]:
    """The counts shipped in the package, by evidence_key ({} without the file)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {k: Count(k=v[0], n=v[1], failed=v[2], torch=tuple(v[3])) for k, v in data.get("counts", {}).items()}


class RecordSource:
    """Store records by catalogue path, each store read once."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._cache: dict[str, Sequence] = {}

    def __call__(self, store: str) -> Sequence:
        if store not in self._cache:
            path = self.root / store
            self._cache[store] = tuple(Store(path).load()) if (path / "trials.jsonl").is_file() else ()
        return self._cache[store]

    def exists(self, store: str) -> bool:
        return (self.root / store / "trials.jsonl").is_file()


def major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def fails_by(family: str, result: TrialResult) -> bool:
    """Whether `result` failed by a repro row's race: a failure whose outcome, signature or summary
    match the row's `family` regex (another race's failure in the same trial does not count)."""
    text = f"{result.outcome.value} {result.signature or ''} {result.signature_summary or ''}"
    return result.outcome.is_failure and re.search(family, text) is not None
