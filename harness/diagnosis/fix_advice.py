"""Fix advice for a named race: the fixes measured against it, which of them `harness stress --fix`
may offer on the program as it is (held, unedited, for the face it shows: races.toml's `edit` and
`leaves`), and what the program must change where none may."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from harness.diagnosis.catalogue import Catalogue, Count, Race, RecordSource, count, major_minor
from harness.diagnosis.matching import first_hit
from harness.runtime.fixes.registry import FIXES
from harness.runtime.guard import Guard, GuardError


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

    def rank(self) -> tuple:
        """Best evidence first: measured on this torch, held, then the lowest rate of failures of
        any kind, then the most trials."""
        n = self.count.n if self.count else 0
        return (not self.same_torch, self.held() is not True, self.count.failed / n if n else 1.0, -n)

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
                leaves=(first_hit(fe.leaves, text) or "") if text else "",
            )
        )
    return sorted(lines, key=FixLine.rank)


def companions(catalogue: Catalogue, records_of: RecordSource) -> dict[str, tuple[str, ...]]:
    """The fixes a fix needs beside it: a race whose precondition (`context`) is a registry fix and
    whose own fix held unedited. stash-refcount's is cstash-tls-init: on the H200 (torch 2.11,
    2026-12-05) cstash-tls-init,global-lock segfaulted 1 of 4 runs of pytorch#123177's program and
    of a two-stage pipeline, and with stash-incref beside it the pipeline ran 0 of 4."""
    out: dict[str, tuple[str, ...]] = {}
    for race in catalogue.races:
        needed_by = [ctx for ctx in race.context if ctx in FIXES]
        if race.kind != "race" or not needed_by:
            continue  # no store read for the races no fix exposes
        held = [fe for fe in race.fixes if not fe.edit and (c := count(fe, race, records_of)) and c.n and not c.k]
        for ctx in needed_by if held else ():
            out.setdefault(ctx, tuple(held[0].name.replace("+", ",").split(",")))
    return out


def try_fixes_command(
    fixes: Sequence[FixLine],
    command: Sequence[str],
    limit: int = 3,
    needs: dict[str, tuple[str, ...]] | None = None,
    *,
    options: Sequence[str] = (),
    tried: frozenset[str] = frozenset(),
) -> str:
    """`stress --fix none --fix A ...` on the user's command: the fixes with hooks that held against
    the race on a program they reach unedited, for the face it shows (on this torch first), raw
    beside them on the same seeds; '' where none did. `needs` (companions) adds the fixes a fix
    needs beside it; `options` (the plan the failures were seen under) are kept, so that the raw
    set fails as it did; `tried`: sets the user's own side by side already ran, left out."""
    sets: list[str] = []
    for line in sorted(fixes, key=FixLine.rank):
        if not line.offered():
            continue
        names = tuple(line.name.replace("+", ",").split(","))
        names += tuple(dict.fromkeys(c for n in names for c in (needs or {}).get(n, ()) if c not in names))
        try:
            guard = Guard(names)
        except GuardError:
            continue  # a script argument (`--x`), not a registry fix
        if guard.policies or ",".join(guard.names) in sets or ",".join(guard.names) in tried:
            continue
        sets.append(",".join(guard.names))
    if not sets:
        return ""
    cmd = " ".join(shlex.quote(a) for a in command) if command else "python YOUR_PROGRAM.py"
    kept = "".join(f" {shlex.quote(o)}" for o in options)
    return (
        f"python -m harness stress -p 2 --max-runs 20{kept} --fix none "
        + " ".join(f"--fix {s}" for s in sets[:limit])
        + f" -- {cmd}"
    )


def change_text(race: Race, fixes: Sequence[FixLine]) -> str:
    """What the program must change where no fix holds on it as it is: the edits the measured fixes
    needed, then the race's own advice (its hint, else its title)."""
    edits = [f"{x.name} held only where {x.edit}" for x in fixes if x.held() and x.edit]
    left = [f"{x.name} leaves this face ({x.leaves!r})" for x in fixes if x.held() and x.leaves]
    return "; ".join([*edits, *left, race.hint or f"remove the race: {race.title}"])
