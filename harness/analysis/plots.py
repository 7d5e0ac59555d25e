"""Plot primitives shared by the report and the bench tables: byte-stable PNGs, one horizontal
bar per cell. matplotlib is passed in (`plt`), imported by the caller only when it draws."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from pathlib import Path

from harness.stores.store import write_atomic

CLEAN_COLOR, FAILED_COLOR = "#4c72b0", "#c44e52"


@contextlib.contextmanager
def png_figure(plt, path: Path, figsize: tuple[float, float]):
    """One figure's axes to draw on; on leaving, the figure laid out and written atomically to
    `path` as a PNG without timestamps in its metadata (regenerating from the same records gives
    the same bytes: REPORT.md's plots are committed), and closed whatever happened."""
    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield ax
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    finally:
        plt.close(fig)
    write_atomic(path, buf.getvalue())


def bar_plot(
    plt,
    path: Path,
    labels,
    values,
    err,
    xlabel: str,
    title: str,
    bar_text: list[str],
    *,
    colors: Sequence[str] | None = None,
) -> Path:
    """One horizontal bar per cell, the cell name in full on the left: the campaign's names run to
    140 characters, which vertical bars cut to their last few (an unreadable first campaign plot)."""
    longest = max((len(s) for s in labels), default=10)
    with png_figure(plt, path, (5.5 + 0.058 * longest, max(2.5, 0.24 * len(labels) + 1.2))) as ax:
        rows = range(len(labels))
        bars = ax.barh(rows, values, xerr=err, capsize=2, color=list(colors) if colors else CLEAN_COLOR)
        ax.bar_label(bars, labels=bar_text, fontsize=7, padding=3)
        ax.set_yticks(rows)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # first cell on top, as in the table
        tops = [v + (err[1][i] if err else 0.0) for i, v in enumerate(values)]
        ax.set_xlim(0, max(tops + [1.0]) * 1.18)  # room for the k/n text past the error bar
        ax.set_xlabel(xlabel)
        ax.set_title(title)
    return path
