"""Failing trials per failure family and torch version over some stores, and the matrices they
came from: REPORT.md's failure-modes overview and `harness families` print it as one table."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.diagnosis import families
from harness.trial.outcome import TrialResult


@dataclass(kw_only=True, slots=True)
class FamilyCounts:
    """Failing trials per (failure family, torch version), the matrices they came from, and the
    trials that count per version (out-of-memory, timeouts and harness errors left out)."""

    failures: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    where: collections.defaultdict[tuple[str, str], set[str]] = field(
        default_factory=lambda: collections.defaultdict(set)
    )
    trials: collections.Counter[str] = field(default_factory=collections.Counter)


def family_counts(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> FamilyCounts:
    out = FamilyCounts()
    for _, records in loaded:
        for r in records:
            if r.replay_of is not None or not r.outcome.counts_as_trial:
                continue
            version = r.torch_version or "?"
            out.trials[version] += 1
            if r.outcome.is_failure:
                fam = families.family(r.signature_summary)
                out.failures[(fam, version)] += 1
                out.where[(fam, version)].add(r.matrix)
    return out


def family_table(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> tuple[list[str], str]:
    """`family_counts` as markdown rows, and the trials that count per version (REPORT.md's
    failure-modes block, `harness families`)."""
    c = family_counts(loaded)
    versions = sorted(c.trials, reverse=True)
    rows = [
        "| family | what | " + " | ".join(f"torch {v}" for v in versions) + " |",
        "|---" * (len(versions) + 2) + "|",
    ]
    for fam in families.ORDER:
        if not any((fam, v) in c.failures for v in versions):
            continue
        entries = [
            f"{c.failures[(fam, v)]} ({', '.join(sorted(c.where[(fam, v)]))})" if (fam, v) in c.failures else "-"
            for v in versions
        ]
        rows.append(f"| {fam} | {families.DESCRIPTIONS.get(fam, 'no known family')} | " + " | ".join(entries) + " |")
    totals = "; ".join(f"torch {v}: {c.trials[v]} trials" for v in versions)
    return rows, totals
