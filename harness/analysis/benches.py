"""REPORT.md's `benches` block and its plots: the `dflash bench` records of the GPU hosts' runs
(harness.analysis.bench_records), one row per bench, and each `harness price` run's benches as one
table of paired prices (harness.analysis.prices) with its plot.

A bench's ratios are taken only against benches of its own run, preset and GPU count: the same
bench moved 18-22% from one run to another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.bench_records import Bench
from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR, png_figure
from harness.analysis.plots import bar_plot as _bar_plot
from harness.analysis.prices import Price, Run, paired_ratios, price_runs, rows
from harness.analysis.verdicts import serialised
from harness.diagnosis import families

BLOCK = "benches"


def _ratio(b: Bench, base: Bench | None) -> str:
    if base is None or not base.tokens_steady or b.tokens_steady is None:
        return "-"
    return f"{b.tokens_steady / base.tokens_steady:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def plot_paths(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    """One plot per preset and GPU count with benches from more than one run: the drift between
    runs (~20%) and the ratios within one are easier seen than read off the table."""
    return [path for path, *_ in _plotted(benches, plots_dir)]


def _plotted(benches: Sequence[Bench], plots_dir: Path) -> list[tuple[Path, str, int, list[Bench]]]:
    """(plot path, preset, GPU count, its benches by run) for each group plot_paths names."""
    groups: dict[tuple[str, int], list[Bench]] = {}
    # A `harness price` run is its table (priced()), not a dozen bars of one GPU-host run.
    for b in sorted((b for b in benches if b.round is None), key=lambda b: (b.host_run or 0, b.strategy)):
        groups.setdefault((b.preset, b.gpus), []).append(b)
    return [
        (
            (group[0].source.parent / "plots" if group[0].source else plots_dir) / f"benches-{preset}-{gpus}gpu.png",
            preset,
            gpus,
            group,
        )
        for (preset, gpus), group in sorted(groups.items())
        if len({b.host_run for b in group}) > 1
    ]


def _bar_text(b: Bench) -> str:
    if b.failed:
        return f"died: {families.family(b.signature)}"
    if b.timed_out:
        return "timed out"
    return "-" if b.tokens_steady is None else f"{b.tokens_steady:.0f}"


def write_plots(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    """The plot_paths: steady tokens/s per bench, one bar per run and configuration; a bench that
    died is a red bar of length 0 with its family, one that timed out a grey one."""
    # matplotlib takes a second or more to import, and only drawing needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, once the Agg backend is chosen

    paths = []
    for path, preset, _gpus, group in _plotted(benches, plots_dir):
        colors = [FAILED_COLOR if b.failed else "#999999" if b.timed_out else CLEAN_COLOR for b in group]
        paths.append(
            _bar_plot(
                plt,
                path,
                [f"run {b.host_run}: {b.strategy}" for b in group],
                [b.tokens_steady or 0.0 for b in group],
                None,
                "tokens/s, steady half, alone on the GPU (ratios hold within a run only)",
                f"dflash bench, {preset}, {group[0].where}",
                [_bar_text(b) for b in group],
                colors=colors,
            )
        )
    return paths


BODY_HEAD = [
    "#### Benches alone on the machine (`dflash bench`: the GPU, or the CPU where GPUs says CPU)",
    "",
]
BODY_TERMS = (
    "tok/s is the steady second half of the run; vs lock is against the fastest serialised "
    "(`global-lock`) bench of the same run, preset and GPU count, vs eager against its eager bench; GPU busy is "
    "nvidia-smi's utilisation over the whole run (compiles included) and over the steady half; stage "
    "busy is the fraction of wall time the drafter / target threads worked."
)
TABLE_HEAD = [
    "| run | preset | GPUs | strategy | steps | tok/s | vs lock | vs eager | GPU busy | GPU busy steady "
    "| busy drafter / target | torch |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def body(
    benches: Sequence[Bench],
    sources: Sequence[str],
    plots: Sequence[str] = (),
    price_links: dict[tuple, str] | None = None,
) -> str:
    """REPORT.md's `benches` block: one row per bench, ratios within its run and preset; a
    `harness price` run's benches as one table per run, each with its plot (priced())."""
    lines = [
        *BODY_HEAD,
        f"Regenerate with `python -m harness report` from {', '.join(f'`{s}`' for s in sources) or 'no files'}. "
        + BODY_TERMS,
        "",
        *TABLE_HEAD,
    ]
    # A `harness price` run's benches are summarised per run below (paired by round), not row by row.
    ran = [b for b in benches if not b.exit_code and b.round is None]
    lines += [_bench_row(b, ran) for b in sorted(ran, key=_run_order)]
    lines += _died_lines(sorted((b for b in benches if b.exit_code and b.round is None), key=_run_order))
    lines += priced(benches, price_links)
    if plots:
        lines += [""] + [f"![{Path(p).stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _run_order(b: Bench) -> tuple:
    return (b.host_run or 0, b.preset, b.gpus, b.strategy)


def _bench_row(b: Bench, ran: Sequence[Bench]) -> str:
    """A bench's row, priced against the fastest serialised and the eager bench of its run."""
    peers = [p for p in ran if p.host_run == b.host_run and p.preset == b.preset and p.gpus == b.gpus]
    locks = [p for p in peers if serialised(p.strategy) and p.tokens_steady]
    lock = max(locks, key=lambda p: p.tokens_steady) if locks else None
    eager = next((p for p in peers if p.strategy == "eager"), None)
    tok = "-" if b.tokens_steady is None else f"{b.tokens_steady:.0f}"
    stage = f"{b.busy.get('drafter', 0):.2f} / {b.busy.get('target', 0):.2f}" if b.busy else "-"
    return (
        f"| {b.host_run if b.host_run is not None else '?'} | {b.preset} | {b.gpus or 'CPU'} | {b.strategy} | {b.steps or '-'} "
        f"| {tok} | {_ratio(b, lock)} | {_ratio(b, eager)} | {_pct(b.gpu_busy)} "
        f"| {_pct(b.gpu_busy_steady)} | {stage} | {b.torch} |"
    )


def _died_lines(died: Sequence[Bench]) -> list[str]:
    """The benches that did not finish, with why."""
    if not died:
        return []
    lines = [
        "",
        "Benches that did not finish (no figures). One that died of an error failed alone on "
        "the GPU, and harness.analysis.verdicts does not recommend its configuration; one that timed "
        "out is not counted either way:",
        "",
    ]
    return lines + [
        f"- run {b.host_run if b.host_run is not None else '?'}, {b.preset}, {b.where}, `{b.strategy}`: "
        + (
            f"exit {b.exit_code}, family {families.family(b.signature)}: `{b.signature}`"
            if b.failed
            else f"{b.signature}"
        )
        for b in died
    ]


@dataclass(frozen=True, slots=True)
class PriceRun:
    """The benches of one `harness price` run (GPU-host run, price run id, preset, GPU count), in run
    order."""

    host_run: int | None
    """The first GPU-host run that benched it (a resumed price run goes on in the next)."""
    run: str
    preset: str
    group: tuple[Bench, ...]

    @property
    def name(self) -> str:
        """`run N` (`runs N+M` when resumed in another), or for a price run outside the GPU-host runs
        (no --run) its start."""
        if self.host_run is None:
            return f"run ? (price run of {self.run})"
        hosts = sorted({b.host_run for b in self.group if b.host_run is not None})
        return f"run {hosts[0]}" if len(hosts) == 1 else "runs " + "+".join(map(str, hosts))

    @property
    def order(self) -> list[str]:
        """Its configurations, the base (the first its first round benched) first."""
        return list(dict.fromkeys(b.strategy for b in sorted(self.group, key=lambda b: b.round)))

    def prices(self) -> list[Price]:
        runs = [
            Run(
                strategy=b.strategy,
                round=b.round,
                tokens=None if b.exit_code else b.tokens_steady,
                died=b.signature if b.failed else None,
                gpu_busy=b.gpu_busy_steady,
                timed_out=b.timed_out,
            )
            for b in self.group
        ]
        return price_runs(runs, self.order)

    @property
    def key(self) -> tuple:
        return (self.host_run, self.run, self.preset, self.group[0].gpus)

    @property
    def plottable(self) -> bool:
        """Two rounds or more of two configurations or more: something to compare per round."""
        return len({b.round for b in self.group}) > 1 and len(self.order) > 1

    def plot_path(self, plots_dir: Path) -> Path:
        """Beside its bench file; named by GPU-host run and price-run start, so two price runs of one
        host run (another `--set`) do not share a file."""
        b = self.group[0]
        stamp = "-".join(
            x for x in (str(self.host_run) if self.host_run is not None else "", re.sub(r"\D", "", self.run)[:14]) if x
        )
        where = f"{b.gpus}gpu" if b.gpus else "cpu"
        return (b.source.parent / "plots" if b.source else plots_dir) / f"price-{self.preset}-{where}-{stamp}.png"


def price_groups(benches: Sequence[Bench]) -> list[PriceRun]:
    """The `harness price` runs among the benches (those with rounds), by start (a price run's id),
    else by GPU-host run: a run resumed in the next GPU-host run (`--resume`) stays one."""
    groups: dict[tuple, list[Bench]] = {}
    for b in benches:  # file order is run order: the first bench of a group is its base
        if b.round is not None:
            n = -1 if b.host_run is None else b.host_run
            groups.setdefault(("", b.run, b.preset, b.gpus) if b.run else (n, "", b.preset, b.gpus), []).append(b)
    out = []
    for (_, run, preset, _), group in groups.items():
        hosts = [b.host_run for b in group if b.host_run is not None]
        out.append(PriceRun(host_run=min(hosts) if hosts else None, run=run, preset=preset, group=tuple(group)))
    return sorted(
        out, key=lambda pr: (pr.host_run if pr.host_run is not None else -1, pr.run, pr.preset, pr.group[0].gpus)
    )


def priced(benches: Sequence[Bench], links: dict[tuple, str] | None = None) -> list[str]:
    """Per `harness price` run: the paired prices against the configuration its first round benched
    first, and its plot where one was drawn (`links`: PriceRun.key -> REPORT.md's link)."""
    out = []
    for pr in price_groups(benches):
        b = pr.group[0]
        rounds = len({x.round for x in pr.group})
        where = b.where + (f", `--set {' '.join(b.sets)}`" if b.sets else "")
        out += [
            "",
            f"Priced in rounds (`harness price`), {pr.name}, {pr.preset}, {where}: {rounds} round(s), "
            f"alternating order; the ratio is each round's tokens/s over `{pr.order[0]}`'s, its median and the "
            "median's interval (sign test), with the interval's coverage:",
            "",
            *rows(pr.prices()),
        ]
        link = (links or {}).get(pr.key)
        if link:
            out += ["", f"![{Path(link).stem}]({link})"]
    return out


def price_plots(benches: Sequence[Bench], plots_dir: Path) -> dict[tuple, Path]:
    """PriceRun.key -> its plot, one per `harness price` run of two rounds or more of two
    configurations or more: each round's ratio to the base as a dot, the median and its interval,
    beside 1.0 (a reader sees at once whether the rounds agree)."""
    return {pr.key: pr.plot_path(plots_dir) for pr in price_groups(benches) if pr.plottable}


def write_price_plots(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    # matplotlib takes a second or more to import, and only drawing needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, once the Agg backend is chosen

    paths = []
    for pr in price_groups(benches):
        if not pr.plottable:
            continue
        ps = pr.prices()
        base, others = ps[0], ps[1:]
        ratios = {p.strategy: paired_ratios(p, base) for p in others}
        longest = max((len(p.strategy) for p in others), default=10)
        path = pr.plot_path(plots_dir)
        with png_figure(plt, path, (5.5 + 0.058 * longest, max(2.2, 0.45 * len(others) + 1.4))) as ax:
            for y, p in enumerate(others):
                _draw_price(ax, y, p, ratios[p.strategy])
            ax.axvline(1.0, color="#999999", linestyle="--", linewidth=1)
            xs = [1.0, *(x for rs in ratios.values() for x in rs)]
            span = max(max(xs) - min(xs), 0.05)
            ax.set_xlim(min(xs) - 0.05 * span, max(xs) + 0.3 * span)  # room for the median's label
            ax.set_yticks(range(len(others)))
            ax.set_yticklabels([p.strategy for p in others], fontsize=7)
            ax.set_ylim(len(others) - 0.5, -0.5)
            ax.set_xlabel("ratio per round (dots); median (|) and its interval (line)", fontsize=8)
            sets = f", --set {' '.join(pr.group[0].sets)}" if pr.group[0].sets else ""
            ax.set_title(
                f"harness price, {pr.name}, {pr.preset}, {pr.group[0].where}{sets}\ntokens/s over `{base.strategy}`",
                fontsize=8,
            )
        paths.append(path)
    return paths


def _draw_price(ax, y: int, p, ratios: Sequence[float]) -> None:
    """One configuration's line: its rounds' ratios, the median with its interval, and its deaths."""
    ax.scatter(ratios, [y] * len(ratios), color=CLEAN_COLOR, s=18, zorder=3)
    if p.ratio is not None:
        ax.plot([p.ratio.low, p.ratio.high], [y, y], color="black", linewidth=1.2, zorder=2)
        ax.plot([p.ratio.median], [y], marker="|", markersize=16, color="black", zorder=4)
        label = f"{p.ratio.median:.2f}x ({p.ratio.coverage:.0%})"
        ax.annotate(label, (p.ratio.high, y), xytext=(6, 4), textcoords="offset points", fontsize=7)
    if p.died:
        ax.annotate(
            f"died {len(p.died)}x",
            (1.0, y),
            xytext=(6, -10),
            textcoords="offset points",
            fontsize=7,
            color=FAILED_COLOR,
        )
