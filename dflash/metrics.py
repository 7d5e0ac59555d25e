"""Training metrics: throughput, per-stage busy fractions, queue depths, loss and accuracy.

Busy time is what a stage thread spends working (collate, target forward, drafter step), not
waiting on a channel or a barrier; a stage's busy fraction is its busy seconds divided by
(threads x wall seconds since the startup gate opened). A stage near 1.0 is the bottleneck.
One JSON line `{"event": "metrics", ...}` goes to stdout every `log_interval_s`; the progress
bar goes to stderr so stdout stays machine-readable.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

import torch
from tqdm import tqdm


class Metrics:
    def __init__(
        self,
        *,
        stage_threads: dict[str, int],
        depths: Callable[[], dict[str, int]] = dict,
        log_interval_s: float,
        total_steps: int,
        start_step: int = 0,
        progress: bool = False,
        out: TextIO | None = None,
    ) -> None:
        self._threads = dict(stage_threads)
        self._busy = {name: 0.0 for name in stage_threads}
        self._depths = depths
        self._interval = log_interval_s
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._t0: float | None = None
        self._last_log = 0.0
        self.step = start_step
        self.start_step = start_step
        self.tokens = 0
        # (monotonic time, cumulative tokens) after each step: the steady-state rate skips the
        # first half of the run, where compiles and cudagraph recordings land (a short campaign
        # trial is otherwise measured mostly on its compile time).
        self._marks: list[tuple[float, int]] = []
        self.losses: list[float] = []
        self.correct: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self._bar = None
        if progress:
            self._bar = tqdm(
                total=total_steps, initial=start_step, file=sys.stderr, desc="train", unit="step", dynamic_ncols=True
            )

    def watch(self, depths: Callable[[], dict[str, int]]) -> None:
        """Set the queue-depth probe (channels exist only once the pipeline is built)."""
        self._depths = depths

    def start(self) -> None:
        """Start the clock (called when the startup gate opens); idempotent."""
        with self._lock:
            if self._t0 is None:
                self._t0 = self._last_log = time.monotonic()

    @contextlib.contextmanager
    def busy(self, stage: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            dt = time.monotonic() - t
            with self._lock:
                self._busy[stage] += dt

    def record_step(self, *, step: int, loss: float, tokens: int, correct: torch.Tensor, counts: torch.Tensor) -> None:
        """Called by the replica leader after each optimizer step."""
        now = time.monotonic()
        with self._lock:
            self.step = step
            self.tokens += tokens
            self._marks.append((now, self.tokens))
            self.losses.append(loss)
            self.correct = correct.clone() if self.correct is None else self.correct + correct
            self.counts = counts.clone() if self.counts is None else self.counts + counts
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        if now - self._last_log >= self._interval:
            self._last_log = now
            self.emit({"event": "metrics", **self.snapshot()})

    def opened_at(self) -> float | None:
        """time.monotonic() when the startup gate opened (None before)."""
        return self._t0

    def step_times(self) -> list[float]:
        """time.monotonic() after each step of this run."""
        with self._lock:
            return [t for t, _ in self._marks]

    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def busy_fractions(self) -> dict[str, float]:
        wall = max(self.elapsed(), 1e-9)
        with self._lock:
            return {k: round(v / (wall * self._threads[k]), 4) for k, v in self._busy.items()}

    def _steady_marks(self) -> tuple[tuple[float, int], tuple[float, int]] | None:
        with self._lock:
            marks = list(self._marks)
        if len(marks) < 4:
            return None
        return marks[len(marks) // 2 - 1], marks[-1]

    def steady_tokens_per_s(self) -> float | None:
        """Tokens/s over the second half of this run's steps (None before 4 steps)."""
        ends = self._steady_marks()
        if ends is None:
            return None
        (t0, n0), (t1, n1) = ends
        return round((n1 - n0) / (t1 - t0), 2) if t1 > t0 else None

    def steady_window(self) -> tuple[float, float] | None:
        """`time.monotonic()` at the start and end of the window steady_tokens_per_s measures."""
        ends = self._steady_marks()
        return None if ends is None else (ends[0][0], ends[1][0])

    def position_accuracy(self) -> list[float]:
        if self.correct is None or self.counts is None:
            return []
        return [round(float(c) / max(float(n), 1.0), 4) for c, n in zip(self.correct, self.counts)]

    def snapshot(self) -> dict:
        elapsed = self.elapsed()
        with self._lock:
            tokens, step = self.tokens, self.step
            loss = self.losses[-1] if self.losses else None
        return {
            "step": step,
            "loss": loss,
            "tokens_per_s": round(tokens / elapsed, 2) if elapsed > 0 else 0.0,
            "tokens_per_s_steady": self.steady_tokens_per_s(),
            "elapsed_s": round(elapsed, 3),
            "busy": self.busy_fractions(),
            "queue_depths": self._depths(),
        }

    def emit(self, record: dict) -> None:
        line = json.dumps(record, sort_keys=False)
        with self._lock:
            print(line, file=self._out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
