"""The same repro cells across torch versions: per race, raw and fixed k/n on each version and what
changed (REPORT.md's `torch-versions` block).

A cell's records are gathered over every store by the torch version each trial ran on (a trial
records its interpreter's torch: `harness matrix --python`), so the CPU catalogue's store (2.13)
and the versions-cpu stores (one per torch) meet in one row. Verdicts per version:
`reproduces` / `not reproduced`, and for the fix `holds` / `fails`, or, where the race no longer
reproduces, `no longer needed` / `now harmful` (the fixed cell fails where raw does not).

A trial counts against a row's race only when its failure is of the repro's family (the
catalogue's `[[repro]] family`); other failures are shown beside it and decide nothing: on torch
2.11's CUDA build without a GPU, r25's raw cell failed 10/10 by another race (fake-guard-exit,
r29), not by its own.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from pathlib import Path

from harness.diagnosis.catalogue import fails_by, load
from harness.diagnosis.families import family
from harness.trial.outcome import TrialResult

BLOCK = "torch-versions"
MATRICES = ("catalogue-cpu", "versions-cpu")
"""Matrices whose cells are compared across versions (they share cell names)."""


def _version(r: TrialResult) -> str | None:
    return (r.torch_version or "").split("+")[0] or None


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))


@functools.cache
def _families() -> dict[str, str]:
    """Repro id -> the regex its own race's failures match (outcome, signature and summary)."""
    return {row.id: row.family for row in load().repros if row.family}


def _own(r: TrialResult) -> bool:
    """Whether a failing trial failed by its repro's race (a workload without a catalogue row: any failure)."""
    family = _families().get(r.workload or "")
    return family is None or fails_by(family, r)


def counts(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> dict[tuple[str, str], tuple[int, int]]:
    """(cell, torch version) -> (failing by the repro's race, counted) over every store's records of MATRICES."""
    return {k: (v[0], v[1]) for k, v in _tally(loaded).items()}


def _tally(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> dict[tuple[str, str], list]:
    """(cell, version) -> [own failures, counted, Counter of the other failures' families]."""
    out: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for _, records in loaded:
        for r in records:
            version = _version(r)
            if r.matrix not in MATRICES or r.replay_of is not None or version is None:
                continue
            if not r.outcome.counts_as_trial:
                continue
            kn = out[(r.cell, version)]
            if r.outcome.is_failure:
                if _own(r):
                    kn[0] += 1
                else:
                    kn[2][family(r.signature_summary)] += 1
            kn[1] += 1
    return out


def _others(tally: list | None) -> str:
    if not tally or not tally[2]:
        return ""
    return " (" + ", ".join(f"+{n} {fam}" for fam, n in tally[2].most_common()) + ")"


def _verdict(raw: tuple[int, int] | None, fix: tuple[int, int] | None, *, earlier: bool = True) -> str:
    """`earlier`: an older torch reproduced it, so a clean raw cell here is a change ("no longer");
    where none did (2.11's CPU cells of races that 2.13 introduced) it is only "not reproduced"."""
    if raw is None or raw[1] == 0:
        return "-"
    reproduces = raw[0] > 0
    words = ["reproduces" if reproduces else ("no longer reproduces" if earlier else "not reproduced")]
    if fix is not None and fix[1]:
        if reproduces:
            words.append("fix holds" if fix[0] == 0 else "fix fails")
        elif earlier:
            words.append("fix no longer needed" if fix[0] == 0 else "fix now harmful")
        else:
            words.append("fix not needed" if fix[0] == 0 else "fix harmful")
    return ", ".join(words)


def body(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> str:
    tallies = _tally(loaded)
    found = {k: (v[0], v[1]) for k, v in tallies.items()}
    versions = sorted({v for _, v in found}, key=_key)
    # The cells versions-cpu runs (each race under its plan, raw and with its fix), not the catalogue
    # store's others (its plain cells): the rows every version is compared on.
    parts = {
        r.cell: (r.workload or r.cell, r.strategy or "")
        for _, records in loaded
        for r in records
        if r.matrix in MATRICES
    }
    later = {r.cell for _, records in loaded for r in records if r.matrix == MATRICES[1]} or {c for c, _ in found}
    races: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for cell in sorted(later):
        workload, strategy = parts[cell]
        races[workload]["raw" if strategy == "raw" else "fix"] = cell
    lines = [
        f"Regenerate with `python -m harness report`. Repro cells of `{MATRICES[0]}` and `{MATRICES[1]}` by the "
        "torch each trial ran on (`harness matrix --preset versions-cpu --python ENV/bin/python`): failing/"
        "counted trials, raw and with the race's fix, under the race's plan; a failure by another race "
        "(its family in brackets) is shown and decides nothing.",
        "",
        "| race | raw cell | fix | " + " | ".join(f"torch {v}" for v in versions) + " |",
        "|---|---|---|" + "---|" * len(versions),
    ]
    for workload, cells in sorted(races.items()):
        raw, fix = cells.get("raw"), cells.get("fix")
        entries, seen = [], False
        for v in versions:
            r, f = found.get((raw, v)), found.get((fix, v)) if fix else None
            if r is None:
                entries.append("not run")
                continue
            text = f"{r[0]}/{r[1]}{_others(tallies.get((raw, v)))}" + (
                f", fix {f[0]}/{f[1]}{_others(tallies.get((fix, v)))}" if f else ""
            )
            entries.append(f"{text}: {_verdict(r, f, earlier=seen)}")
            seen = seen or r[0] > 0
        fix_name = parts[fix][1] if fix else "-"
        lines.append(f"| {workload} | `{raw}` | `{fix_name}` | " + " | ".join(entries) + " |")
    return "\n".join(lines)
