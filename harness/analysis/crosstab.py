"""Does a fix go with a failure family? Every stored trial split by whether its strategy holds the fix.

    python -m harness crosstab FIX [--family NAME ...] [--cells GLOB ...] [--without FIX ...] [--store DIR ...]
                                   [--json]

A matrix table answers "how often did this cell fail"; this answers the question across cells and
matrices that a new failure face raises: is it the fix itself? On the H200 the native crashes
(families segv, segv-gc, pybind-dealloc) fell almost only on trials whose strategy held
cstash-tls-init (gpu-campaign and gpu-topology-4, torch 2.11), the pointer to repro r22. Per store and in total:
k/n of trials whose failure is in the families (all failures without --family), with the fix and
without, 95% Wilson intervals and the one-sided Fisher p both ways: that the fix's trials fail more
often (is the fix the cause?) and less often (does the fix answer it? stash-incref, 2026-12-01).
Trials that ran out of memory, timed out or hit a harness error, and replays, are left out, as in
the matrix tables. A count says which trials failed, not why: cells without the fix may have died
of something else first (say so where it matters).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from harness import stats
from harness.analysis.verdicts import holds
from harness.diagnosis import families
from harness.runtime.errors import UserInputError
from harness.trial.outcome import TrialResult


class CrosstabError(UserInputError):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True, slots=True)
class Row:
    store: str
    k_with: int
    n_with: int
    k_without: int
    n_without: int
    p_more: float | None
    """One-sided Fisher p that trials with the fix fail (in the families) more often."""
    p_less: float | None = None
    """One-sided Fisher p that they fail less often."""

    def line(self) -> str:
        def part(k: int, n: int) -> str:
            if not n:
                return "-"
            ci = stats.wilson(k, n)
            return f"{k}/{n} [{100 * ci.low:.0f}%, {100 * ci.high:.0f}%]"

        def p(value: float | None) -> str:
            return "-" if value is None else f"{value:.2g}"

        return (
            f"| {self.store} | {part(self.k_with, self.n_with)} | {part(self.k_without, self.n_without)} "
            f"| {p(self.p_more)} | {p(self.p_less)} |"
        )


def rows(
    loaded: Sequence[tuple[str, Sequence[TrialResult]]],
    fix: str,
    wanted: frozenset[str] | None,
    cells: Sequence[str] = (),
    without: Sequence[str] = (),
) -> list[Row]:
    """One row per store with any counted trial, then `total` when there are several; trials whose
    strategy holds a fix of `without` are left out."""
    # scipy takes a second or more to import, and only the Fisher p-values need it.
    from scipy.stats import fisher_exact

    counts = []
    for name, records in loaded:
        c = _counts(records, fix, wanted, cells, without)
        if c[1] or c[3]:
            counts.append((name, c))
    if len(counts) > 1:
        counts.append(("total", [sum(c[i] for _, c in counts) for i in range(4)]))
    out = []
    for name, (kw, nw, ko, no) in counts:
        more = less = None
        if nw and no:
            more = float(fisher_exact([[kw, nw - kw], [ko, no - ko]], alternative="greater").pvalue)
            less = float(fisher_exact([[kw, nw - kw], [ko, no - ko]], alternative="less").pvalue)
        out.append(Row(store=name, k_with=kw, n_with=nw, k_without=ko, n_without=no, p_more=more, p_less=less))
    return out


def _counts(
    records: Sequence[TrialResult],
    fix: str,
    wanted: frozenset[str] | None,
    cells: Sequence[str],
    without: Sequence[str],
) -> list[int]:
    """[k_with, n_with, k_without, n_without] over one store's counted trials of the chosen cells."""
    c = [0, 0, 0, 0]
    for r in records:
        if r.replay_of is not None or not r.outcome.counts_as_trial:
            continue
        if cells and not any(fnmatch.fnmatchcase(r.cell, g) for g in cells):
            continue
        strategy = r.strategy or ""
        if any(holds(strategy, w) for w in without):
            continue
        side = 0 if holds(strategy, fix) else 2
        c[side + 1] += 1
        if r.outcome.is_failure and (wanted is None or families.family(r.signature_summary) in wanted):
            c[side] += 1
    return c


def table(fix: str, wanted: frozenset[str] | None, found: Sequence[Row]) -> str:
    what = ", ".join(sorted(wanted)) if wanted else "any failure"
    return "\n".join(
        [
            f"Trials failing with {what}, by whether the strategy holds `{fix}` "
            "(k/n, 95% Wilson; p: one-sided Fisher that trials with the fix fail more often, less often):",
            "",
            f"| store | with {fix} | without | p more | p less |",
            "|---|---|---|---|---|",
            *(r.line() for r in found),
        ]
    )
