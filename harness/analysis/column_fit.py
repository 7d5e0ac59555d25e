"""A plain-text table fitted to a terminal width: columns that may wrap give up width, widest slack
first, and their entries wrap onto more lines (a cell name breaks after its `:`, `+`, `@`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

GAP = "  "
_PIECE = re.compile(r"[^ +:@,]*[+:@,]+ ?|[^ +:@,]+ ?| +")
HARD_BREAK = 20
"""A piece longer than this may be cut mid-word rather than hold its column this wide."""


def pieces(text: str) -> list[str]:
    """The text cut after its separators and spaces: the places a line may break."""
    return _PIECE.findall(text) or [""]


def wrap(text: str, width: int) -> list[str]:
    """Greedy lines of at most `width` characters; a piece wider than a line is cut."""
    lines = [""]
    for piece in pieces(text):
        if lines[-1] and len(lines[-1] + piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
        while len(lines[-1].rstrip()) > width:
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return [line.rstrip() for line in lines]


def _floor(column: Sequence[str]) -> int:
    """The narrowest a wrapping column gets: its longest piece, up to HARD_BREAK."""
    longest = max(len(p.rstrip()) for text in column for p in pieces(text))
    return min(longest, HARD_BREAK)


def widths(rows: Sequence[Sequence[str]], wrapping: set[int], limit: int) -> list[int]:
    """Each column's width: its widest entry, less what the wrapping columns give up to fit `limit`."""
    natural = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    floor = [_floor([r[i] for r in rows]) if i in wrapping else natural[i] for i in range(len(natural))]
    out = list(natural)
    excess = sum(out) + len(GAP) * (len(out) - 1) - limit
    while excess > 0:
        slack = [out[i] - floor[i] for i in range(len(out))]
        i = max(range(len(out)), key=slack.__getitem__)
        if slack[i] <= 0:
            break  # nothing left to give: the table runs wider than the limit
        out[i] -= 1
        excess -= 1
    return out


def render(rows: Sequence[Sequence[str]], wrapping: set[int], limit: int) -> list[str]:
    """The rows as lines within `limit` columns, the first row a header ruled off below."""
    ws = widths(rows, wrapping, limit)
    lines = []
    for n, row in enumerate(rows):
        cells = [wrap(v, w) for v, w in zip(row, ws)]
        for k in range(max(len(c) for c in cells)):
            parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, ws)]
            lines.append(GAP.join(parts).rstrip())
        if n == 0:
            lines.append(GAP.join("-" * w for w in ws))
    return lines
