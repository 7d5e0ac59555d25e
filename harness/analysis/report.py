"""Per-cell summaries of stored trials, as a text table, JSON, REPORT.md blocks and PNG plots.

Everything here is a function of the stored records alone (no clock, no spec), so regenerating a
report from the same store gives byte-identical text and plots. Cells are ordered by workload,
then strategy (`raw` first), then plan.

Rates follow concurrency-anchors.md section 4.3: k/n with a Wilson 95% interval, and at k = 0 the
rule-of-three bound 3/n as well ("p < 3/n (95%)"); TIMEOUT and HARNESS_ERROR trials are counted
apart and are not in n. tokens/s is compared with the fastest clean (k = 0) cell of the same
workload, because workloads differ in size.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import stats
from harness.text import clip
from harness.analysis import benches, recommend

from harness.diagnosis import families
from harness.campaign.cells import split_cell
from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR, png_figure
from harness.analysis.plots import bar_plot as _bar_plot
from harness.trial.outcome import Outcome, TrialResult
from harness.stores.store import Store, write_atomic

MAX_SIGNATURES_IN_TABLE = 1


@dataclass(kw_only=True, slots=True)
class CellSummary:
    cell: str
    workload: str
    strategy: str
    plan: str
    n: int
    """Trials that count (not TIMEOUT, not HARNESS_ERROR)."""
    k: int
    """Failures among them (CRASH, ABORT, HANG, WRONG_RESULT)."""
    timeouts: int
    errors: int
    skipped: int
    """OK trials whose workload printed SKIP (e.g. needs CUDA): they prove nothing."""
    low: float
    high: float
    rule_of_three: float | None
    """3/n when k == 0 and n > 0."""
    outcomes: dict[str, int]
    resources: int = 0
    """RESOURCE trials (device memory exhausted): shown as +N oom, left out of k/n."""
    families: list[tuple[str, int]] = field(default_factory=list)
    """(failure family of harness.diagnosis.families, count) over the failing trials, most frequent first."""
    signatures: list[tuple[str, int]] = field(default_factory=list)
    """(signature summary, count), most frequent first."""
    ttff_s: float | None = None
    """Median serial time to the first failure (stats.median_time_to_first_failure)."""
    median_duration_s: float | None = None
    tokens_per_s: float | None = None
    tokens_range: tuple[float, float] | None = None
    """Slowest and fastest trial behind the median: trials that share a GPU move with their
    neighbours (gpu-campaign's gpu-bound no-cudagraphs+global-lock ran 9,882-42,922 tokens/s)."""
    tokens_ratio: float | None = None
    """tokens_per_s / the fastest clean cell's of the same workload."""
    gpu_peak_gib: float | None = None
    """The most one trial of the cell held on one GPU (`TrialResult.gpu_peak_gib`): what a fix
    costs in memory."""
    fisher_p: float | None = None
    """One-sided Fisher exact p that this strategy fails less often than `raw` under the same
    workload and plan (concurrency-anchors.md 4.3, before/after a fix); None for raw itself."""


def _cell_key(cell: str) -> tuple:
    w, s, p = split_cell(cell)
    return (w, s != "raw", s, p != "-", p)


def summarize(records: Iterable[TrialResult]) -> list[CellSummary]:
    by_cell: dict[str, list[TrialResult]] = collections.defaultdict(list)
    for r in records:
        if r.replay_of is None:
            by_cell[r.cell].append(r)
    cells = [_summarize_cell(c, sorted(rs, key=lambda r: r.trial_index)) for c, rs in by_cell.items()]
    cells.sort(key=lambda c: _cell_key(c.cell))
    _fill_ratios(cells)
    _fill_fisher(cells)
    return cells


def _summarize_cell(cell: str, rs: list[TrialResult]) -> CellSummary:
    counted = [r for r in rs if r.outcome.counts_as_trial]
    failed = [r.outcome.is_failure for r in counted]
    n, k = len(counted), sum(failed)
    ci = stats.wilson(k, n)
    sig_counts = collections.Counter(r.signature or "?" for r in counted if r.outcome.is_failure)
    names = {}
    for r in counted:
        if r.outcome.is_failure:
            names.setdefault(r.signature or "?", r.signature_summary or r.signature or r.outcome.name)
    # Time to failure, not run time, for failing trials: a run that crashes at 2 s of a 60 s
    # budget says the failure takes 2 s to show.
    times = [(r.time_to_failure_s if r.outcome.is_failure and r.time_to_failure_s is not None else r.duration_s)
             for r in counted]
    tokens = [r.tokens_per_s for r in counted if r.tokens_per_s is not None and not r.outcome.is_failure]
    peaks = [p for p in (r.gpu_peak_gib for r in rs) if p is not None]
    w, s, p = split_cell(cell)
    return CellSummary(
        cell=cell, workload=w, strategy=s, plan=p, n=n, k=k,
        timeouts=sum(r.outcome is Outcome.TIMEOUT for r in rs),
        errors=sum(r.outcome is Outcome.HARNESS_ERROR for r in rs),
        resources=sum(r.outcome is Outcome.RESOURCE for r in rs),
        skipped=sum(bool(r.skipped) for r in rs),
        low=ci.low, high=ci.high, rule_of_three=stats.rule_of_three(n) if k == 0 and n else None,
        outcomes=dict(sorted(collections.Counter(r.outcome.name for r in rs).items())),
        signatures=sorted(((names[s], c) for s, c in sig_counts.items()), key=lambda sc: (-sc[1], sc[0])),
        families=sorted(collections.Counter(families.family(r.signature_summary) for r in counted
                                            if r.outcome.is_failure).items(), key=lambda fc: (-fc[1], fc[0])),
        ttff_s=stats.median_time_to_first_failure(times, failed) if n else None,
        median_duration_s=stats.median_or_none([r.duration_s for r in counted]),
        tokens_per_s=stats.median_or_none(tokens),
        tokens_range=(min(tokens), max(tokens)) if tokens else None,
        gpu_peak_gib=max(peaks) if peaks else None,
    )


def _fill_ratios(cells: list[CellSummary]) -> None:
    best: dict[str, float] = {}
    for c in cells:
        if c.k == 0 and c.n > 0 and c.tokens_per_s:
            best[c.workload] = max(best.get(c.workload, 0.0), c.tokens_per_s)
    for c in cells:
        if c.tokens_per_s is not None and best.get(c.workload):
            c.tokens_ratio = c.tokens_per_s / best[c.workload]


def _fill_fisher(cells: list[CellSummary]) -> None:
    from scipy.stats import fisher_exact  # seconds to import: only when a comparison exists

    raw = {(c.workload, c.plan): c for c in cells if c.strategy == "raw"}
    for c in cells:
        base = raw.get((c.workload, c.plan))
        if c.strategy == "raw" or base is None or not c.n or not base.n:
            continue
        table = [[c.k, c.n - c.k], [base.k, base.n - base.k]]
        c.fisher_p = float(fisher_exact(table, alternative="less").pvalue)


# --- text ------------------------------------------------------------------------------------------

HEADERS = ("cell", "k/n", "rate", "95% CI (Wilson)", "p vs raw", "outcomes", "top signature", "TTFF", "tok/s",
           "vs best")
MEMORY_HEADER = "GPU GiB"
"""A last column, only where some cell has a figure (a GPU matrix): CPU tables stay as they were."""


def _with_memory(cells: Sequence[CellSummary]) -> bool:
    return any(c.gpu_peak_gib is not None for c in cells)


def _headers(memory: bool) -> tuple[str, ...]:
    return HEADERS + ((MEMORY_HEADER,) if memory else ())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}s" if x < 600 else f"{x / 60:.1f}m"


def cell_row(c: CellSummary, *, memory: bool = False) -> tuple[str, ...]:
    ci = f"[{_pct(c.low)}, {_pct(c.high)}]"
    if c.rule_of_three is not None:
        ci += f" p<{_pct(c.rule_of_three)}"
    extra = [f"{c.timeouts} timeout" if c.timeouts else "", f"{c.resources} oom" if c.resources else "",
             f"{c.errors} error" if c.errors else ""]
    kn = f"{c.k}/{c.n}" + "".join(f" +{e}" for e in extra if e)
    outcomes = " ".join(f"{name}:{count}" for name, count in c.outcomes.items())
    if c.skipped:
        outcomes += f" (SKIP:{c.skipped})"
    top = "; ".join(f"{clip(s, 60)} x{n}" for s, n in c.signatures[:MAX_SIGNATURES_IN_TABLE]) or "-"
    tok = "-" if c.tokens_per_s is None else f"{c.tokens_per_s:.0f}"
    ratio = "-" if c.tokens_ratio is None else f"{c.tokens_ratio:.2f}x"
    rate = _pct(c.k / c.n) if c.n else "-"
    fisher = "-" if c.fisher_p is None else f"{c.fisher_p:.3g}"
    row = (c.cell, kn, rate, ci, fisher, outcomes, top, _seconds(c.ttff_s), tok, ratio)
    return row + (("-" if c.gpu_peak_gib is None else f"{c.gpu_peak_gib:.1f}",) if memory else ())


def text_table(cells: Sequence[CellSummary]) -> str:
    memory = _with_memory(cells)
    rows = [_headers(memory)] + [cell_row(c, memory=memory) for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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
    return text + _oom(c)


def _oom(c: CellSummary) -> str:
    return f" +{c.resources} oom" if c.resources else ""


def family_legend(cells: Sequence[CellSummary]) -> list[str]:
    """`FAMILY: what it is` for every family in these cells, in harness.diagnosis.families order."""
    seen = {name for c in cells for name, _ in c.families}
    return [f"{name}: {families.DESCRIPTIONS.get(name, 'no known family')}"
            for name in families.ORDER if name in seen]


def markdown_table(cells: Sequence[CellSummary]) -> str:
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    memory = _with_memory(cells)
    top = _headers(memory)
    lines = ["| " + " | ".join(top) + " |", "|" + "---|" * len(top)]
    lines += ["| " + " | ".join(esc(v) for v in cell_row(c, memory=memory)) + " |" for c in cells]
    return "\n".join(lines)


def signature_lines(cells: Sequence[CellSummary]) -> list[str]:
    """Every signature of every cell with its count (the table shows only the top one)."""
    out = []
    for c in cells:
        for sig, count in c.signatures:
            out.append(f"{c.cell}: {count} x {sig}")
    return out


def summary_json(cells: Sequence[CellSummary], **extra: Any) -> dict[str, Any]:
    return {**extra, "cells": [asdict(c) for c in cells]}


# --- REPORT.md and plots -----------------------------------------------------------------------


def begin_marker(name: str) -> str:
    return f"<!-- harness:begin {name} -->"


def end_marker(name: str) -> str:
    return f"<!-- harness:end {name} -->"


def replace_block(text: str, name: str, body: str) -> str:
    """Put `body` between the markers of `name`, keeping everything else verbatim.

    A missing block is appended at the end; markers out of order or repeated are an error, since
    guessing would risk destroying hand-written text.
    """
    begin, end = begin_marker(name), end_marker(name)
    nb, ne = text.count(begin), text.count(end)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if nb == 0 and ne == 0:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return f"{text}{sep}{block}\n"
    i, j = text.find(begin), text.find(end)
    if nb != 1 or ne != 1 or j < i:
        raise ValueError(f"REPORT markers for {name!r} are unbalanced (begin x{nb}, end x{ne})")
    return text[:i] + block + text[j + len(end):]


def plot_paths(cells: Sequence[CellSummary], name: str, plots_dir: Path) -> list[Path]:
    """The files write_plots writes: the strategy grid when there is one, the failure-rate plot,
    and tokens/s when any cell has it."""
    paths = [plots_dir / f"{name}-grid.png"] if grid_layout(cells) else []
    paths.append(plots_dir / f"{name}-failure-rate.png")
    if any(c.tokens_per_s is not None for c in cells):
        paths.append(plots_dir / f"{name}-tokens-per-s.png")
    return paths


@dataclass(frozen=True)
class Grid:
    """Strategies down, (workload, plan) across: the matrix as issue 5 asks it (does a strategy
    hold on both presets, with and without the scheduler?), which one bar per cell spreads over
    a page (gpu-campaign: 120 bars)."""
    strategies: list[str]
    columns: list[tuple[str, str]]
    cells: dict[tuple[str, tuple[str, str]], CellSummary]


def grid_layout(cells: Sequence[CellSummary]) -> Grid | None:
    """The grid of `cells`, or None where it would say nothing a bar plot does not: fewer than two
    strategies or fewer than two (workload, plan) columns."""
    strategies = sorted({c.strategy for c in cells}, key=lambda s: (s != "raw", s))
    columns = sorted({(c.workload, c.plan) for c in cells}, key=lambda wp: (wp[0], wp[1] != "-", wp[1]))
    if len(strategies) < 2 or len(columns) < 2:
        return None
    squares = {(c.strategy, (c.workload, c.plan)): c for c in cells}
    # `w:s` and `w:s@-` would share a square (split_cell reads both as plan "-"): the matrix never
    # names a cell without its plan, so two cells on one square is a bug, not something to draw.
    assert len(squares) == len(cells), "two cells on one grid square"
    return Grid(strategies, columns, squares)


def grid_text(cell: CellSummary | None) -> str:
    """What a grid square says: k/n, then +N oom where trials ran out of memory; empty if not run."""
    if cell is None:
        return ""
    return f"{cell.k}/{cell.n}" + (f"\n+{cell.resources} oom" if cell.resources else "")


def write_grid(grid: Grid, path: Path) -> Path:
    """The strategy grid as a heat map of the failure rate, each square labelled k/n (a 0/2 square
    is as green as a 0/29 one: the label says which). The longer side runs down the page: the
    repro stores have one workload per repro and a few strategies (gpu-repros: 24 columns, 13
    strategies), the campaign the other way round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [f"{w}@{p}" for w, p in grid.columns]
    down = len(grid.columns) > len(grid.strategies)
    rows, across = (columns, grid.strategies) if down else (grid.strategies, columns)

    def cell_at(i: int, j: int) -> CellSummary | None:
        s, col = (grid.strategies[j], grid.columns[i]) if down else (grid.strategies[i], grid.columns[j])
        return grid.cells.get((s, col))

    nan = float("nan")
    rates = [[(c.k / c.n if c is not None and c.n else nan) for c in (cell_at(i, j) for j in range(len(across)))]
             for i in range(len(rows))]
    longest_row, longest_col = max(len(r) for r in rows), max(len(c) for c in across)
    # Turned columns' names stand upright above them: their length is the figure's height, not width.
    with png_figure(plt, path, (2.0 + 0.058 * longest_row + (0.8 if down else 1.15) * len(across),
                                max(2.5, 0.26 * len(rows) + 1.6 + (0.07 * longest_col if down else 0.0)))) as ax:
        cmap = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="#eeeeee")
        image = ax.imshow(rates, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        for i in range(len(rows)):
            for j in range(len(across)):
                r = rates[i][j]
                dark = r == r and (r <= 0.15 or r >= 0.8)       # r == r: not NaN; the map's dark ends
                ax.text(j, i, grid_text(cell_at(i, j)), ha="center", va="center", fontsize=6.5,
                        color="white" if dark else "black")
        ax.set_xticks(range(len(across)))
        ax.set_xticklabels([c.replace("@", "\n@", 1) for c in across] if not down else across, fontsize=7,
                           rotation=90 if down else 0)
        ax.xaxis.tick_top()
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=7)
        ax.figure.colorbar(image, ax=ax, fraction=0.03, pad=0.02).set_label("failure rate (k/n)", fontsize=7)
        ax.set_title(f"{path.stem.removesuffix('-grid')}: failures per strategy, workload and fault plan "
                     "(grey: not run, or no trial that counts)", fontsize=8)
    return path


def write_plots(cells: Sequence[CellSummary], name: str, plots_dir: Path) -> list[Path]:
    """The strategy grid (where there is one), failure rate with Wilson error bars, and median
    tokens/s, one bar per cell (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = grid_layout(cells)
    paths = [write_grid(grid, plots_dir / f"{name}-grid.png")] if grid else []
    labels = [c.cell for c in cells]
    rates = [c.k / c.n if c.n else 0.0 for c in cells]
    err = [[max(0.0, r - c.low) for r, c in zip(rates, cells)], [max(0.0, c.high - r) for r, c in zip(rates, cells)]]
    paths.append(_bar_plot(plt, plots_dir / f"{name}-failure-rate.png", labels, [100 * r for r in rates],
                           [[100 * e for e in side] for side in err], "failures (%), Wilson 95%",
                           f"{name}: failure rate per cell",
                           [f"{c.k}/{c.n}{_oom(c)}" for c in cells]))
    tok = [c for c in cells if c.tokens_per_s is not None]
    if tok:
        # A failing cell's throughput comes from its trials that finished: shown, but in another
        # colour, so that a fast bar is not read as a candidate (gpu-campaign's no-cudagraphs@-
        # ran 20,081 tokens/s in the 2 of 4 trials that did not deadlock).
        # Whiskers from the slowest to the fastest trial: a median of trials that shared the GPU
        # with different neighbours is not a cost until its spread says so.
        spread = [[c.tokens_per_s - c.tokens_range[0] for c in tok], [c.tokens_range[1] - c.tokens_per_s for c in tok]]
        paths.append(_bar_plot(plt, plots_dir / f"{name}-tokens-per-s.png", [c.cell for c in tok],
                               [c.tokens_per_s for c in tok], spread,
                               "median tokens/s, whiskers slowest..fastest trial (red: the cell failed in k of n trials)",
                               f"{name}: throughput per cell", [f"{c.tokens_per_s:.0f} ({c.k}/{c.n})" for c in tok],
                               colors=[FAILED_COLOR if c.k else CLEAN_COLOR for c in tok]))
    return paths


def benches_for(matrix: str, bench_runs: Sequence) -> list:
    """The benches that may price matrix `matrix`'s verdicts: those on as many GPUs as the trials of
    the workload of that name took (the preset's `Workload.gpus`; 1 for a matrix that is no
    preset). call.sh names benches by preset alone, and gpu-topology-4's `launch-bound` is not
    gpu-campaign's (issue 6)."""
    from harness.campaign import presets
    gpus = {w.name: w.gpus for w in presets.get(matrix).workloads.values()} if matrix in presets.PRESETS else {}
    return [b for b in bench_runs if b.gpus == gpus.get(b.preset, 1)]


def block_body(name: str, store_dir: Path, records: Sequence[TrialResult], cells: Sequence[CellSummary],
               plots: Sequence[Path], report_dir: Path, retired: Sequence[TrialResult] = (),
               bench_runs: Sequence = ()) -> str:
    """The block of matrix `name`; `retired` are the records `harness retire` took out of its count;
    `bench_runs` (harness.analysis.benches) price the verdict alone on the GPU where a bench ran it."""
    started = sorted(r.started_at for r in records if r.started_at)
    versions = sorted({r.torch_version for r in records if r.torch_version})
    hosts = sorted({r.host for r in records if r.host})
    lines = [
        f"#### Matrix `{name}`: {len(records)} trials in `{_rel(store_dir, report_dir)}`",
        "",
        f"Regenerate with `python -m harness report --store {_rel(store_dir, report_dir)}`. "
        "k/n counts CRASH/ABORT/HANG/WRONG_RESULT over trials that ran to an outcome (TIMEOUT, "
        "device out-of-memory (oom) and harness errors are shown as +N and left out); p<x is the rule-of-three bound at k=0; p vs raw is "
        "the one-sided Fisher exact p that the strategy fails less often than raw; TTFF is "
        "the median serial time to the first failure; vs best is tokens/s over the fastest clean cell "
        "of the same workload" + ("; GPU GiB is the most one trial held on one GPU: the workload's "
                                  "reported allocator peak (the CUDA context, about 1 GiB, not counted) "
                                  "or, where higher, the runner's nvidia-smi samples (context counted)"
                                  if _with_memory(cells) else "") + ".",
        "",
        f"Trials started {started[0] if started else '?'} .. {started[-1] if started else '?'}; "
        f"torch {', '.join(versions) or '?'}; hosts {', '.join(hosts) or '?'}.",
        "",
    ]
    pivot = pivot_table(cells)
    if pivot:
        lines += ["At a glance: k/n and the failure families (harness.diagnosis.families) per cell; +N oom = out of "
                  "device memory, left out.", "", pivot, ""]
        legend = family_legend(cells)
        if legend:
            lines += ["Families: " + "; ".join(legend) + ".", ""]
    lines.append(markdown_table(cells))
    sigs = signature_lines(cells)
    if sigs:
        lines += ["", "Signatures:", ""] + [f"- `{s}`" for s in sigs]
    priced = benches_for(name, bench_runs)
    verdicts = recommend.lines(recommend.recommend(cells, bench_runs=priced), bench_runs=priced)
    if verdicts:
        lines += ["", f"Verdict ({recommend.__name__}: 0 failures and >= {recommend.MIN_STRESSED} trials under "
                  "a fault plan; priced against global-lock and eager):", ""] + [f"- {v}" for v in verdicts]
    for summary, trial_id, text in hang_excerpts(records, store_dir):
        lines += ["", f"Hang dump excerpt, `{summary}` (trial `{trial_id}`, py-spy, innermost frames):", "",
                  "```", text, "```"]
    for x in native_excerpts(records, store_dir):
        lines += ["", f"Native stack excerpt, `{x.summary}`: crash site `{clip(x.site, 100)}` in {x.trials} of "
                  f"{x.of} trials with a native stack (trial `{x.trial_id}`, crashing thread, innermost "
                  f"frames):", "", "```", x.text, "```"]
    lines += retired_lines(store_dir, retired, report_dir)
    if plots:
        lines += [""] + [f"![{p.stem}]({_rel(p, report_dir)})" for p in plots]
    return "\n".join(lines)


def retired_lines(store_dir: Path, mine: Sequence[TrialResult], report_dir: Path) -> list[str]:
    """What `harness retire` took out of this matrix's count: how many records, why, and their
    failure families (they were observed, under a workload that has since changed)."""
    from harness.stores import retire
    if not mine:
        return []
    fams = collections.Counter(families.family(r.signature_summary) for r in mine if r.outcome.is_failure)
    failed = ", ".join(f"{f} {n}" for f, n in sorted(fams.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"
    lines = ["", f"Retired (`python -m harness retire`; kept in `{_rel(store_dir / retire.RETIRED_NAME, report_dir)}`, "
             f"not in the tables above): {len(mine)} records of {len({r.cell for r in mine})} cells; failures by "
             f"family: {failed}. Why:", ""]
    lines += [f"- {e['at'][:10]}, cells `{', '.join(e['cells'])}`, {e['records']} records: {e['reason']}"
              for e in retire.reasons(store_dir)]
    return lines


def hang_excerpts(records: Sequence[TrialResult], store_dir: Path) -> list[tuple[str, str, str]]:
    """(signature summary, trial id, excerpt) for the first stored trial of each hang signature
    whose py-spy dump (`artefacts/<trial>/pyspy.json`) is in the store: the threads the hang key
    is built from, innermost frames first."""
    from harness.trial.hangs import excerpt, read_pyspy_json
    from harness.trial.signature import in_hang_key

    store = Store(store_dir)
    out, seen = [], set()
    for r in sorted(records, key=lambda r: r.trial_id):
        if r.outcome is not Outcome.HANG or r.signature in seen or not r.artefacts:
            continue
        path = store.artefacts_of(r) / "pyspy.json"
        if not path.is_file():
            continue
        seen.add(r.signature)
        text = excerpt(read_pyspy_json(path), keep=in_hang_key)
        out.append((r.signature_summary or r.signature or "hang", r.trial_id, text.rstrip()))
    return out


NATIVE_EXCERPT_FRAMES = 10


@dataclass(kw_only=True, slots=True, frozen=True)
class NativeExcerpt:
    summary: str
    site: str
    """harness.trial.native.crash_site of the trials' kept native stacks."""
    trials: int
    """Trials of this signature whose native stack landed at `site`."""
    of: int
    """Trials of this signature with a kept native stack."""
    trial_id: str
    text: str


def native_excerpts(records: Sequence[TrialResult], store_dir: Path) -> list[NativeExcerpt]:
    """Per native-crash signature, its crash sites (harness.trial.native.crash_site of every stored
    `native_stack.txt`) with counts and the first trial's innermost frames: one signature can
    hide several causes (the H200 campaign's segfaults during garbage collection share one key,
    whatever the finaliser), and the native site is what tells them apart."""
    from harness.trial import native
    from harness.trial.runner import NATIVE_STACK_NAME

    store = Store(store_dir)
    by_sig: dict[str, list[tuple[TrialResult, list, str]]] = {}
    for r in sorted(records, key=lambda r: r.trial_id):
        if r.outcome is not Outcome.ABORT or not r.artefacts:
            continue
        path = store.artefacts_of(r) / NATIVE_STACK_NAME
        if path.is_file():
            frames = native.read_kept(path.read_text(errors="replace"))
            by_sig.setdefault(r.signature or "", []).append((r, frames, native.crash_site(frames)))
    out = []
    for kept in by_sig.values():
        sites = collections.Counter(site for _, _, site in kept)
        for site, n in sites.most_common():
            r, frames = next((r, f) for r, f, s in kept if s == site)
            out.append(NativeExcerpt(summary=r.signature_summary or r.signature or "native crash", site=site,
                                     trials=n, of=len(kept), trial_id=r.trial_id,
                                     text=native.render(frames, limit=NATIVE_EXCERPT_FRAMES)))
    return out


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(Path(path).resolve(), Path(base).resolve()).replace(os.sep, "/")


def matrix_names(records: Sequence[TrialResult]) -> list[str]:
    return sorted({r.matrix for r in records if r.replay_of is None})


OVERVIEW_BLOCK = "failure-modes"


@dataclass(kw_only=True, slots=True)
class FamilyCounts:
    """Failing trials per (failure family, torch version), the matrices they came from, and the
    trials that count per version (out-of-memory, timeouts and harness errors left out)."""

    failures: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    where: collections.defaultdict[tuple[str, str], set[str]] = field(
        default_factory=lambda: collections.defaultdict(set))
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
    """`family_counts` as markdown rows, and the trials that count per version (`overview_body`,
    `harness families`)."""
    c = family_counts(loaded)
    versions = sorted(c.trials, reverse=True)
    rows = [f"| family | what | " + " | ".join(f"torch {v}" for v in versions) + " |",
            "|---" * (len(versions) + 2) + "|"]
    for fam in families.ORDER:
        if not any((fam, v) in c.failures for v in versions):
            continue
        entries = [f"{c.failures[(fam, v)]} ({', '.join(sorted(c.where[(fam, v)]))})" if (fam, v) in c.failures
                   else "-" for v in versions]
        rows.append(f"| {fam} | {families.DESCRIPTIONS.get(fam, 'no known family')} | " + " | ".join(entries) + " |")
    totals = "; ".join(f"torch {v}: {c.trials[v]} trials" for v in versions)
    return rows, totals


def overview_body(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> str:
    """Failing trials per failure family and torch version over every store: which modes were
    seen on which version, and from which matrices (out-of-memory and harness errors left out)."""
    rows, totals = family_table(loaded)
    return "\n".join([
        "#### Failure modes by torch version, over every store",
        "",
        "Regenerate with `python -m harness report`. Failing trials per failure family "
        "(`harness/diagnosis/families.py`) and torch version, with the matrices they came from; trials that "
        f"ran out of device memory, timed out or hit a harness error are left out; records taken out of a "
        f"matrix's count by `harness retire` are in (their failures were observed). Trials that count: {totals}.",
        "",
        *rows,
    ])


def rebuild(store_dirs: Sequence[Path], out: Path, *, overview: bool = False) -> list[str]:
    """Regenerate REPORT.md's blocks and the plots for every matrix in these stores, and with
    `overview` the failure-modes block over all of them (only meaningful for every store).

    Every store is read and the new text built before anything is written, so an unreadable
    store or broken markers leave all files as they were. Returns the block names written.
    """
    from harness.stores.retire import retired_store

    from harness.diagnosis import tables
    from harness.diagnosis.catalogue import RecordSource

    loaded = [(Path(d), Store(d).load()) for d in store_dirs]
    retired = {d: retired_store(d).load() for d, _ in loaded}
    readme: str | None = None
    text = out.read_text(encoding="utf-8") if out.exists() else "# Report\n"
    names, plots = [], []
    bench_files = sorted(f for root in {Path(d).parent for d in store_dirs} for f in benches.files(root))
    bench_runs = benches.load(bench_files)
    if overview:
        # Retired records count here: their failures were observed (under an older workload).
        observed = loaded + list(retired.items())
        text = replace_block(text, OVERVIEW_BLOCK, overview_body(observed))
        names.append(OVERVIEW_BLOCK)
        text = replace_block(text, tables.RACES_BLOCK, tables.race_table(records_of=RecordSource(out.parent)))
        names.append(tables.RACES_BLOCK)
        repro_readme = out.parent / "repro" / "README.md"
        if repro_readme.is_file():
            readme = replace_block(repro_readme.read_text(encoding="utf-8"), tables.REPROS_BLOCK, tables.repro_table())
    bench_plots = benches.plot_paths(bench_runs, bench_files[0].parent / "plots") if bench_files else []
    price_plots = benches.price_plots(bench_runs, bench_files[0].parent / "plots") if bench_files else {}
    if bench_files:
        text = replace_block(text, benches.BLOCK, benches.body(bench_runs, [_rel(f, out.parent) for f in bench_files],
                                                               [_rel(p, out.parent) for p in bench_plots],
                                                               {k: _rel(p, out.parent) for k, p in price_plots.items()}))
        names.append(benches.BLOCK)
    for store_dir, records in loaded:
        for name in matrix_names(records):
            mine = [r for r in records if r.matrix == name and r.replay_of is None]
            cells = summarize(mine)
            paths = plot_paths(cells, name, store_dir / "plots")
            gone = [r for r in retired[store_dir] if r.matrix == name]
            text = replace_block(text, name, block_body(name, store_dir, mine, cells, paths, out.parent, gone,
                                                        bench_runs))
            plots.append((cells, name, store_dir / "plots"))
            names.append(name)
    for cells, name, plots_dir in plots:
        write_plots(cells, name, plots_dir)
    if bench_plots:
        benches.write_plots(bench_runs, bench_plots[0].parent)
    if price_plots:
        benches.write_price_plots(bench_runs, bench_files[0].parent / "plots")
    write_atomic(out, text.encode("utf-8"))
    if readme is not None:
        write_atomic(repro_readme, readme.encode("utf-8"))
        names.append(tables.REPROS_BLOCK)
    return names
