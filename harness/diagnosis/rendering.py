"""Rendering findings: the summary line, then each finding in full (`harness diagnose`) or brief
(under a matrix or stress table)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from harness.diagnosis.catalogue import NOT_RACE_KINDS
from harness.diagnosis.finding import Finding
from harness.text import clip


def render(
    findings: Sequence[Finding], *, width: int = 3, brief: bool = False, deterministic: str = "", unit: str = "run"
) -> str:
    """Every finding; `brief` (under a matrix or stress table): the verdict, the fixes that held
    on the failure's torch and the repro, one line each. `deterministic`: why the caller found the
    failures deterministic (stress's stop rule); a failure no race names then reads
    `deterministic: <reason>`, never "possibly new". `unit`: what one failure source is (a run; a
    hunt's test, read from its first failure)."""
    if not findings:
        return f"diagnosis: no failing {unit}"
    out = [summary_line(findings, unit)]
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


def _no_race(f: Finding) -> bool:
    """Named so as not to be read as a race: it has advice, no fix held against it."""
    return f.race is not None and f.matches[0].kind in NOT_RACE_KINDS


def _brief(f: Finding, deterministic: str) -> list[str]:
    out = [f"  {clip(_head(f), 160)}", f"    {f.verdict(deterministic)}"]
    if _no_race(f):
        return [*out, f"    what to do: {f.hint or f.change}"]
    if f.race is not None:
        out.append(f"    held on this torch: {_held_here(f)}" + (f"; reproduce: {f.repros[0]}" if f.repros else ""))
    if f.measured:
        out.append(f"    {f.measured}")
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
    if f.measured:
        out.append(f"  {f.measured}")
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


def summary_line(findings: Sequence[Finding], unit: str = "run") -> str:
    """How many failing runs (`unit`s) showed a catalogued race, then each race's runs and
    tracebacks (a run showing two races counts under both), and the runs that exited OK with a
    race's face."""
    # What is named only so as not to be read as a race (the recompile limit, a test's own state) is none.
    findings = [dataclasses.replace(f, matches=[]) if _no_race(f) else f for f in findings]
    failing = [f for f in findings if f.outcome != "OK"]
    runs = set().union(*(f.sources for f in failing)) if failing else set()
    known = set().union(*(f.sources for f in failing if f.race is not None)) if failing else set()
    line = f"diagnosis: {len(known)} of {len(runs)} failing {unit}s matched a catalogued race"
    per: dict[str, list] = {}
    for f in findings:
        if f.race is not None:
            entry = per.setdefault(f"{f.race}{' at exit 0' if f.outcome == 'OK' else ''}", [set(), 0])
            entry[0].update(f.sources)
            entry[1] += f.count
    if per:
        line += "; " + ", ".join(
            f"{race} in {len(r)} {unit}{'s' if len(r) != 1 else ''}" + (f" ({n} tracebacks)" if n > len(r) else "")
            for race, (r, n) in sorted(per.items(), key=lambda kv: -len(kv[1][0]))
        )
    return line
