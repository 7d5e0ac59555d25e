"""Progress of a running matrix: per-cell counts and the lines printed while it runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from harness.campaign.loop import format_elapsed
from harness.trial.outcome import Outcome, TrialResult


@dataclass(kw_only=True, slots=True)
class CellState:
    """Live counts of one cell (stored records included, so a resumed matrix shows totals)."""

    name: str
    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    resources: int = 0
    errors: int = 0
    skipped_by_rule: int = 0

    def stopped(self, max_failures: int | None) -> bool:
        """The max-failures stop rule: this cell starts no more trials."""
        return max_failures is not None and self.failures >= max_failures

    def add(self, result: TrialResult) -> None:
        if result.outcome.counts_as_trial:
            self.runs += 1
            self.failures += result.outcome.is_failure
        elif result.outcome is Outcome.TIMEOUT:
            self.timeouts += 1
        elif result.outcome is Outcome.RESOURCE:
            self.resources += 1
        else:
            self.errors += 1

    def line(self, elapsed_s: float) -> str:
        """Go stress style: `1m05s: cell: 12 runs so far, 3 failures (25.00%)`."""
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        extra = "".join(
            [
                f", {self.timeouts} timeouts" if self.timeouts else "",
                f", {self.resources} out of memory" if self.resources else "",
                f", {self.errors} harness errors" if self.errors else "",
                f", {self.skipped_by_rule} left by stop rules" if self.skipped_by_rule else "",
            ]
        )
        return f"{format_elapsed(elapsed_s)}: {self.name}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%){extra}"


STATUS_INTERVAL_S = 60.0
"""Without a terminal, how often a `N trials done, R running` line is printed between trials."""


class LiveLines:
    """One line per cell on stderr. On a terminal the lines update in place (rich.live) and the
    clock ticks every second; otherwise the changed cell's line is printed after every trial,
    plus a status line every STATUS_INTERVAL_S, which keeps logs readable."""

    def __init__(self, cells: list[CellState], stream: TextIO, live: bool) -> None:
        self._cells = cells
        self._stream = stream
        self._start = time.monotonic()
        self._next_tick = self._start
        self._live = None
        if live:
            self._live = Live(self._render(), console=Console(file=stream), refresh_per_second=2, auto_refresh=False)
            self._live.start()

    def _render(self):  # -> rich.text.Text

        elapsed = time.monotonic() - self._start
        return Text("\n".join(c.line(elapsed) for c in self._cells))

    def update(self, cell: CellState) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            print(cell.line(time.monotonic() - self._start), file=self._stream, flush=True)

    def tick(self, done: int, running: int, pending: int) -> None:
        now = time.monotonic()
        if now < self._next_tick:
            return
        if self._live is not None:
            self._next_tick = now + 1.0
            self._live.update(self._render(), refresh=True)
        else:
            if now > self._start + 1.0:
                print(
                    f"{format_elapsed(now - self._start)}: {done} trials done, {running} running, {pending} pending",
                    file=self._stream,
                    flush=True,
                )
            self._next_tick = now + STATUS_INTERVAL_S

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()
