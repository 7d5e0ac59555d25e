"""Each matrix's plots: the strategy grid (strategies down, workload and plan across) where
there is one, the failure rate per cell with its Wilson interval, and tokens/s per cell.

The PNGs are committed beside REPORT.md, so the same summaries must give the same bytes
(harness.analysis.plots.png_figure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.cell_tables import oom_suffix
from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR, bar_plot, png_figure
from harness.analysis.summary import CellSummary


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
    """Strategies down, (workload, plan) across: the matrix as the campaign asks it (does a strategy
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
    # matplotlib takes a second or more to import, and only drawing needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, once the Agg backend is chosen

    down = len(grid.columns) > len(grid.strategies)
    rows, across, squares = _oriented(grid, down)
    nan = float("nan")
    rates = [[(c.k / c.n if c is not None and c.n else nan) for c in row] for row in squares]
    with png_figure(plt, path, _grid_size(rows, across, down)) as ax:
        cmap = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="#eeeeee")
        image = ax.imshow(rates, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        _label_squares(ax, rates, squares)
        ax.set_xticks(range(len(across)))
        ax.set_xticklabels(
            [c.replace("@", "\n@", 1) for c in across] if not down else across, fontsize=7, rotation=90 if down else 0
        )
        ax.xaxis.tick_top()
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=7)
        ax.figure.colorbar(image, ax=ax, fraction=0.03, pad=0.02).set_label("failure rate (k/n)", fontsize=7)
        ax.set_title(
            f"{path.stem.removesuffix('-grid')}: failures per strategy, workload and fault plan "
            "(grey: not run, or no trial that counts)",
            fontsize=8,
        )
    return path


def _oriented(grid: Grid, down: bool) -> tuple[list[str], list[str], list[list[CellSummary | None]]]:
    """Row names, column names and the cell of each square, strategies across when `down`."""
    columns = [f"{w}@{p}" for w, p in grid.columns]
    if down:
        squares = [[grid.cells.get((s, col)) for s in grid.strategies] for col in grid.columns]
        return columns, list(grid.strategies), squares
    squares = [[grid.cells.get((s, col)) for col in grid.columns] for s in grid.strategies]
    return list(grid.strategies), columns, squares


def _grid_size(rows: Sequence[str], across: Sequence[str], down: bool) -> tuple[float, float]:
    # Turned columns' names stand upright above them: their length is the figure's height, not width.
    longest_row, longest_col = max(len(r) for r in rows), max(len(c) for c in across)
    return (
        2.0 + 0.058 * longest_row + (0.8 if down else 1.15) * len(across),
        max(2.5, 0.26 * len(rows) + 1.6 + (0.07 * longest_col if down else 0.0)),
    )


def _label_squares(ax, rates: list[list[float]], squares: list[list[CellSummary | None]]) -> None:
    for i, row in enumerate(squares):
        for j, cell in enumerate(row):
            r = rates[i][j]
            dark = r == r and (r <= 0.15 or r >= 0.8)  # r == r: not NaN; the map's dark ends
            ax.text(j, i, grid_text(cell), ha="center", va="center", fontsize=6.5, color="white" if dark else "black")


def write_plots(cells: Sequence[CellSummary], name: str, plots_dir: Path) -> list[Path]:
    """The strategy grid (where there is one), failure rate with Wilson error bars, and median
    tokens/s, one bar per cell (Agg backend)."""
    # matplotlib takes a second or more to import, and only drawing needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, once the Agg backend is chosen

    grid = grid_layout(cells)
    paths = [write_grid(grid, plots_dir / f"{name}-grid.png")] if grid else []
    labels = [c.cell for c in cells]
    rates = [c.k / c.n if c.n else 0.0 for c in cells]
    err = [[max(0.0, r - c.low) for r, c in zip(rates, cells)], [max(0.0, c.high - r) for r, c in zip(rates, cells)]]
    paths.append(
        bar_plot(
            plt,
            plots_dir / f"{name}-failure-rate.png",
            labels,
            [100 * r for r in rates],
            [[100 * e for e in side] for side in err],
            "failures (%), Wilson 95%",
            f"{name}: failure rate per cell",
            [f"{c.k}/{c.n}{oom_suffix(c)}" for c in cells],
        )
    )
    tok = [c for c in cells if c.tokens_per_s is not None]
    if tok:
        # A failing cell's throughput comes from its trials that finished: shown, but in another
        # colour, so that a fast bar is not read as a candidate (gpu-campaign's no-cudagraphs@-
        # ran 20,081 tokens/s in the 2 of 4 trials that did not deadlock).
        # Whiskers from the slowest to the fastest trial: a median of trials that shared the GPU
        # with different neighbours is not a cost until its spread says so.
        spread = [[c.tokens_per_s - c.tokens_range[0] for c in tok], [c.tokens_range[1] - c.tokens_per_s for c in tok]]
        paths.append(
            bar_plot(
                plt,
                plots_dir / f"{name}-tokens-per-s.png",
                [c.cell for c in tok],
                [c.tokens_per_s for c in tok],
                spread,
                "median tokens/s, whiskers slowest..fastest trial (red: the cell failed in k of n trials)",
                f"{name}: throughput per cell",
                [f"{c.tokens_per_s:.0f} ({c.k}/{c.n})" for c in tok],
                colors=[FAILED_COLOR if c.k else CLEAN_COLOR for c in tok],
            )
        )
    return paths
