"""Cell summaries as tables: one row per cell as text (the matrix command) or markdown
(REPORT.md), the strategy-by-column pivot with its family legend, every signature with its count,
and the summaries as JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from harness.analysis import column_fit
from harness.analysis.summary import CellSummary
from harness.diagnosis import families
from harness.text import clip

MAX_SIGNATURES_IN_TABLE = 1

HEADERS = (
    "cell",
    "k/n",
    "rate",
    "95% CI (Wilson)",
    "p vs raw",
    "outcomes",
    "top signature",
    "TTFF",
    "tok/s",
    "vs best",
)
TEXT_WIDTH = 120
WRAPPING = ("cell", "k/n", "window", "95% CI (Wilson)", "p vs raw", "outcomes")
"""The text table's columns whose entries may wrap onto more lines to fit TEXT_WIDTH."""
ALPHA = 0.05
MIN_BOUND_TRIALS = 4
"""Under 4 trials the rule-of-three bound 3/n is 100% or more: 0 failures rule out no failure rate."""
TOO_FEW = "too few trials"
LEGEND = (
    "k/n: failed / trials that count (+ timeouts, oom, harness errors, not counted); rate: k/n.",
    "95% CI (Wilson): the failure rate's 95% interval; p<X: at 0 failures, its one-sided 95% bound (3/n).",
    "p vs raw: one-sided Fisher exact p that the cell fails less often than raw under the same workload and plan.",
    f"{TOO_FEW}: fewer than a test needs to reject at 5% at its best: under {MIN_BOUND_TRIALS} at 0 failures",
    "  (3/n >= 100%); in p vs raw, p >= 5% even with 0 failures here and all of raw's (1/C(n + raw's n, n)).",
    "TTFF: median serial time to the first failure; tok/s: median tokens per second of the cell's trials.",
    "vs best: tok/s over the fastest clean cell's of the same workload, measured on the same host and day.",
    "The top signature of each cell is in the signature list below.",
)
EXPOSURE_LEGEND = "window: whether the race's window opened in the cell's trials (harness.faults.exposure)."
MEMORY_LEGEND = "GPU GiB: the most one trial of the cell held on one GPU."
MEMORY_HEADER = "GPU GiB"
"""A last column, only where some cell has a figure (a GPU matrix): CPU tables stay as they were."""
EXPOSURE_HEADER = "window"
"""A column after k/n, only where some trial measured its exposure (harness.faults.exposure): the
tables of stores recorded before the probes stay as they were (`NOT_MEASURED` says why)."""
NOT_MEASURED = "exposure not measured"
NOT_MEASURED_NOTE = (
    f"{NOT_MEASURED} in any trial here (recorded before the exposure probes, or run with "
    "exposure off): a clean cell's 0/n does not say whether its race's window opened."
)


def has_memory(cells: Sequence[CellSummary]) -> bool:
    """Whether any cell has a GPU memory figure, which adds the last column."""
    return any(c.gpu_peak_gib is not None for c in cells)


def has_exposure(cells: Sequence[CellSummary]) -> bool:
    """Whether any trial of these cells measured exposure, which adds the window column."""
    return any(c.measured for c in cells)


def _headers(memory: bool, exposure: bool = False) -> tuple[str, ...]:
    head = HEADERS[:2] + ((EXPOSURE_HEADER,) if exposure else ()) + HEADERS[2:]
    return head + ((MEMORY_HEADER,) if memory else ())


def exposure_text(c: CellSummary) -> str:
    """The cell's window, read with its k: `clean, window opened in 27 of 29 trials (1,840 times)`;
    `window never opened` where no trial met it (a fix that keeps it shut is not shown to hold);
    `exposure not measured` for records from before the probes."""
    if c.windows == ():
        return "no probe for its race"
    if not c.measured:
        return NOT_MEASURED
    trials = f"{c.measured} trial{'s' if c.measured != 1 else ''}" + ("" if c.measured == c.n else " measured")
    eager = f", {c.eager_openings:,} eagerly" if c.eager_openings else ""
    if c.exposed == 0:
        if c.eager_only:
            return (
                f"window never opened on the compiled path (opened only as eager calls, in "
                f"{c.eager_only} of {trials}, {_times(c.eager_openings)})"
            )
        return f"window never opened in {trials}"
    head = "clean, " if c.k == 0 else ""
    return f"{head}window opened in {c.exposed} of {trials} ({_times(c.openings)}{eager})"


def _times(n: int) -> str:
    return f"{n:,} time{'s' if n != 1 else ''}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}s" if x < 600 else f"{x / 60:.1f}m"


def bound_text(c: CellSummary) -> str:
    """After the interval: the rule-of-three bound at 0 failures, or why there is none."""
    if c.rule_of_three is None:
        return ""
    return f" {TOO_FEW}" if c.n < MIN_BOUND_TRIALS else f" p<{_pct(c.rule_of_three)}"


def can_reject(n: int, n_raw: int) -> bool:
    """Whether the one-sided Fisher test of n trials against raw's n_raw can reach p < 5% at all:
    its smallest p (0 failures here, every raw trial failed) is 1/C(n + n_raw, n)."""
    return math.comb(n + n_raw, n) * ALPHA > 1


def fisher_text(c: CellSummary, n_raw: int | None) -> str:
    if c.fisher_p is None:
        return "-"
    return TOO_FEW if n_raw is not None and not can_reject(c.n, n_raw) else f"{c.fisher_p:.3g}"


def raw_counts(cells: Sequence[CellSummary]) -> dict[tuple[str, str], int]:
    """Raw's n per (workload, plan): what each cell's p vs raw was tested against."""
    return {(c.workload, c.plan): c.n for c in cells if c.strategy == "raw"}


def cell_row(
    c: CellSummary, *, memory: bool = False, exposure: bool = False, n_raw: int | None = None
) -> tuple[str, ...]:
    ci = f"[{_pct(c.low)}, {_pct(c.high)}]" + bound_text(c)
    extra = [
        f"{c.timeouts} timeout" if c.timeouts else "",
        f"{c.resources} oom" if c.resources else "",
        f"{c.errors} error" if c.errors else "",
    ]
    kn = f"{c.k}/{c.n}" + "".join(f" +{e}" for e in extra if e)
    outcomes = " ".join(f"{name}:{count}" for name, count in c.outcomes.items())
    if c.skipped:
        outcomes += f" (SKIP:{c.skipped})"
    top = "; ".join(f"{clip(s, 60)} x{n}" for s, n in c.signatures[:MAX_SIGNATURES_IN_TABLE]) or "-"
    tok = "-" if c.tokens_per_s is None else f"{c.tokens_per_s:.0f}"
    ratio = "-" if c.tokens_ratio is None else f"{c.tokens_ratio:.2f}x"
    rate = _pct(c.k / c.n) if c.n else "-"
    row = (
        (c.cell, kn)
        + ((exposure_text(c),) if exposure else ())
        + (rate, ci, fisher_text(c, n_raw), outcomes, top, _seconds(c.ttff_s), tok, ratio)
    )
    return row + (("-" if c.gpu_peak_gib is None else f"{c.gpu_peak_gib:.1f}",) if memory else ())


def _rows(cells: Sequence[CellSummary]) -> list[tuple[str, ...]]:
    """The header and one row per cell, with the columns these cells have figures for."""
    memory, exposure = has_memory(cells), has_exposure(cells)
    raw = raw_counts(cells)
    rows = [_headers(memory, exposure)]
    for c in cells:
        rows.append(cell_row(c, memory=memory, exposure=exposure, n_raw=raw.get((c.workload, c.plan))))
    return rows


def text_table(cells: Sequence[CellSummary], width: int = TEXT_WIDTH) -> str:
    """The matrix command's table within `width` columns: long entries wrap, and the top signature
    is left to the signature list printed under it."""
    rows = _rows(cells)
    keep = [i for i, h in enumerate(rows[0]) if h != "top signature"]
    rows = [tuple(r[i] for i in keep) for r in rows]
    wrapping = {i for i, h in enumerate(rows[0]) if h in WRAPPING}
    return "\n".join(column_fit.render(rows, wrapping, width))


def text_legend(cells: Sequence[CellSummary]) -> list[str]:
    """The terms of text_table, a line or two each, for the columns it has."""
    memory, exposure = has_memory(cells), has_exposure(cells)
    return (
        list(LEGEND[:1])
        + ([EXPOSURE_LEGEND] if exposure else [])
        + list(LEGEND[1:])
        + ([MEMORY_LEGEND] if memory else [])
    )


def pivot_table(cells: Sequence[CellSummary]) -> str | None:
    """Strategies down, workload@plan across, `k/n FAMILY` in each entry: the matrix at a glance.
    None when there is one column (the flat table then says as much)."""
    columns = list(dict.fromkeys(f"{c.workload}@{c.plan}" for c in cells))
    if len(columns) < 2:
        return None
    grid: dict[str, dict[str, CellSummary]] = {}
    for c in cells:
        grid.setdefault(c.strategy, {})[f"{c.workload}@{c.plan}"] = c
    rows = ["| strategy | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for strategy, by_column in grid.items():
        entries = [_pivot_entry(by_column.get(col)) for col in columns]
        rows.append(f"| {strategy} | " + " | ".join(entries) + " |")
    return "\n".join(rows)


def _pivot_entry(c: CellSummary | None) -> str:
    if c is None:
        return ""
    text = f"{c.k}/{c.n}"
    if c.families:
        text += " " + ",".join(name for name, _ in c.families)
    return text + oom_suffix(c)


def oom_suffix(c: CellSummary) -> str:
    """` +N oom` where trials of the cell ran out of device memory, else nothing."""
    return f" +{c.resources} oom" if c.resources else ""


def family_legend(cells: Sequence[CellSummary]) -> list[str]:
    """`FAMILY: what it is` for every family in these cells, in harness.diagnosis.families order."""
    seen = {name for c in cells for name, _ in c.families}
    return [f"{name}: {families.DESCRIPTIONS.get(name, 'no known family')}" for name in families.ORDER if name in seen]


def markdown_table(cells: Sequence[CellSummary]) -> str:
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    top, *rows = _rows(cells)
    lines = ["| " + " | ".join(top) + " |", "|" + "---|" * len(top)]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def exposure_lines(cells: Sequence[CellSummary]) -> list[str]:
    """Per cell, every window its trials measured: `F2 27/29 trials (1,840 times)`, first the
    ones that opened; the first opening's median time where some did."""
    out = []
    for c in cells:
        if not c.by_window:
            continue
        rows = sorted(c.by_window.items(), key=lambda kv: (-kv[1][1], kv[0]))
        parts = [
            f"{w} {opened}/{measured}"
            + (f" ({_times(times)}{f', {eager:,} eagerly' if eager else ''})" if times else "")
            for w, (measured, opened, times, eager) in rows
        ]
        first = f"; first opening at {_seconds(c.first_open_s)} (median)" if c.first_open_s is not None else ""
        out.append(f"{c.cell}: {', '.join(parts)}{first}")
    return out


def signature_lines(cells: Sequence[CellSummary]) -> list[str]:
    """Every signature of every cell with its count (the table shows only the top one)."""
    out = []
    for c in cells:
        for sig, count in c.signatures:
            out.append(f"{c.cell}: {count} x {sig}")
    return out


def summary_json(cells: Sequence[CellSummary], **extra: Any) -> dict[str, Any]:
    return {**extra, "cells": [asdict(c) for c in cells]}
