"""Paired prices: each configuration's per-round tokens/s over the base configuration's.

A `harness price` run benches every configuration once per round, in alternating order
(harness.bench.pricing), so two benches of one round ran minutes apart and their ratio cancels
what drifts over the run. A configuration's price is the median of those ratios with the
sign test's interval for it (harness.stats.median_interval); these are its rows, whether the
benches come from the run's own records or from a bench file (harness.analysis.benches).
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness import stats


@dataclass(kw_only=True, slots=True)
class Price:
    strategy: str
    tokens: list[float]
    died: list[str]
    ratio: stats.MedianInterval | None
    """Per-round tokens/s over the base configuration's, summarised; None for the base itself or
    without a round where both ran."""
    timed_out: list[str] = field(default_factory=list)
    """Rounds whose bench was still running at the bench limit (killed, dumped): no figure and not
    a failure, but the table says so rather than showing fewer benches."""
    by_round: dict[int, float] = field(default_factory=dict)
    """Round -> tokens/s of the benches that ran to a figure: what `pairwise` pairs."""
    gpu_busy: list[float] = field(default_factory=list)
    """Steady-half GPU busy fractions of its benches that have one."""


@dataclass(frozen=True, slots=True)
class Run:
    """One bench of a round, as price_runs() reads it (from `harness price`'s records or a bench file's)."""

    strategy: str
    round: int
    tokens: float | None
    died: str | None = None
    gpu_busy: float | None = None
    """The GPU's busy fraction over the bench's steady half (None on CPU): a configuration is
    priced by its tokens/s and by how busy it keeps the GPU."""
    timed_out: bool = False


def paired_ratios(row: Price, col: Price) -> list[float]:
    """Row's tokens/s over column's in each round where both ran to a figure, in round order: the
    one pairing of the base column, the grid and the plots."""
    return [t / col.by_round[r] for r, t in sorted(row.by_round.items()) if r in col.by_round]


def price_runs(runs: Sequence[Run], order: Sequence[str]) -> list[Price]:
    """Per configuration of `order` (the first is the base): its figures, its died benches, and the
    median of its per-round ratios to the base with the median's interval."""
    out = []
    for name in order:
        mine = [x for x in runs if x.strategy == name]
        out.append(
            Price(
                strategy=name,
                tokens=[x.tokens for x in mine if x.tokens],
                died=[f"round {x.round}: {x.died}" for x in mine if x.died is not None],
                ratio=None,
                timed_out=[f"round {x.round}" for x in mine if x.timed_out],
                by_round={x.round: x.tokens for x in mine if x.tokens},
                gpu_busy=[x.gpu_busy for x in mine if x.tokens and x.gpu_busy is not None],
            )
        )
    for p in out[1:]:
        p.ratio = stats.median_interval(paired_ratios(p, out[0]))
    return out


def pairwise(ps: Sequence[Price]) -> list[str]:
    """With three configurations or more, every one over every other, paired by round as the base
    column is: a run prices the lock-free configuration against the lock and the lock against the
    no-cudagraphs lock at once, and the lock-free one over the no-cudagraphs lock is a figure the
    base column does not show. Row over column; the median of the per-round ratios and its interval."""
    if len(ps) < 3:
        return []
    letters = [chr(ord("A") + i) for i in range(len(ps))]
    grid = [[stats.median_interval(paired_ratios(row, col)) if row is not col else None for col in ps] for row in ps]
    coverages = collections.Counter(m.coverage for ms in grid for m in ms if m is not None)
    usual = coverages.most_common(1)[0][0] if coverages else None
    lines = [
        "",
        "Every configuration over every other (row over column, per round: the median and its "
        f"interval{f', coverage {usual:.0%}' if usual is not None else ''}):",
        "",
        "| | " + " | ".join(letters) + " |",
        "|---|" + "---|" * len(ps),
    ]
    for letter, row, ms in zip(letters, ps, grid):
        # A pair with fewer rounds (a died bench) has a weaker interval: its coverage is said.
        cells = [
            ("-" if row is col else "no shared round")
            if m is None
            else f"{m.median:.2f}x ({m.low:.2f}-{m.high:.2f}"
            + (f", {m.coverage:.0%}" if m.coverage != usual else "")
            + ")"
            for m, col in zip(ms, ps)
        ]
        lines.append(f"| {letter} `{row.strategy}` | " + " | ".join(cells) + " |")
    return lines


def rows(ps: Sequence[Price], target: float | None = None) -> list[str]:
    """The markdown table of prices (and the died benches, and the target's verdicts)."""
    base = ps[0].strategy
    busy = any(p.gpu_busy for p in ps)  # a GPU run: its busy fraction is part of the price
    lines = [
        "| configuration | ran | median tok/s | range | vs base (median) | interval | coverage |"
        + (" GPU busy |" if busy else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if busy else ""),
    ]
    for p in ps:
        med = f"{statistics.median(p.tokens):.0f}" if p.tokens else "-"
        rng = f"{min(p.tokens):.0f}-{max(p.tokens):.0f}" if p.tokens else "-"
        ran = f"{len(p.tokens)}/{len(p.tokens) + len(p.died) + len(p.timed_out)}"
        if p.ratio is None:
            vs, iv, cov = ("1.00x (base)", "-", "-") if p.strategy == base else ("-", "-", "-")
        else:
            vs, iv, cov = f"{p.ratio.median:.2f}x", f"{p.ratio.low:.2f}x-{p.ratio.high:.2f}x", f"{p.ratio.coverage:.0%}"
        gpu = (f" {statistics.median(p.gpu_busy):.0%} |" if p.gpu_busy else " - |") if busy else ""
        lines.append(f"| `{p.strategy}` | {ran} | {med} | {rng} | {vs} | {iv} | {cov} |{gpu}")
    for p in ps:
        lines += [f"- `{p.strategy}` died alone: {d}" for d in p.died]
        if p.timed_out:
            lines.append(
                f"- `{p.strategy}` timed out: {', '.join(p.timed_out)} (still running at the bench limit, "
                "dumped and killed: no figure, not a failure)"
            )
    lines += pairwise(ps)
    if target is not None:
        lines.append("")
        for p in ps[1:]:
            if p.ratio is not None:
                lines.append(f"- `{p.strategy}` against {target}x `{base}`: {verdict(p.ratio, target)}")
    return lines


def verdict(ratio: stats.MedianInterval, target: float) -> str:
    """Whether the interval clears the target: `meets` only when its low end does."""
    how = f"interval {ratio.low:.2f}x-{ratio.high:.2f}x ({ratio.coverage:.0%})"
    if ratio.low >= target:
        return f"meets ({how})"
    if ratio.high < target:
        return f"misses ({how})"
    return f"undecided ({how}): more rounds"
