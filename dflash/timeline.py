"""Where a run's wall time goes: seconds per phase, from the process's start to its last line.

A fresh GPU host spent about 150 s of a 275 s gpu-default run before its first step and after its
last with nothing printed that said on what. `Timeline` times each phase (imports, target load,
corpus, compile and warm-up per drafter thread, first step, training, checkpoint, evaluation,
export), prints a line while a phase runs longer than `tick_s` (with what it is doing, from
`note`), and gives the final record its `phases`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import TextIO

TICK_S = 15.0
"""A phase still running after this long prints what it is doing, and again every TICK_S."""


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc), else 0: the imports before any of our
    code ran count as a phase too."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # fields[0] is the state (field 3); starttime is field 22, in clock ticks since boot
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Timeline:
    """Phases of one run, in order; thread-safe (drafter threads record their own warm-ups)."""

    def __init__(self, err: TextIO, *, tick_s: float = TICK_S) -> None:
        self.err = err
        self.tick_s = tick_s
        now = time.monotonic()
        self.origin = now - process_age_s()
        self.phases: dict[str, float] = {}
        self.threads: dict[str, float] = {}
        self.marks: dict[str, float] = {}
        if now > self.origin:
            self.phases["imports"] = round(now - self.origin, 2)
        self._lock = threading.Lock()
        self._current: tuple[str, float] | None = None
        self._detail = ""
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start_ticker(self) -> None:
        if self._ticker is None and self.tick_s > 0:
            # Not a `dflash-` name: the watchdog's stall report lists those as the pipeline's threads.
            self._ticker = threading.Thread(target=self._tick, name="timeline-ticker", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(2.0)

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self._lock:
                cur, detail = self._current, self._detail
            if cur is not None and time.monotonic() - cur[1] >= self.tick_s:
                what = f": {detail}" if detail else ""
                print(f"phase {cur[0]}: {time.monotonic() - cur[1]:.0f} s so far{what}", file=self.err, flush=True)

    @contextlib.contextmanager
    def phase(self, name: str, *, record: bool = True) -> Iterator[None]:
        """Time `name` (added to what it already had: a phase may come back); `record=False`: only
        name it to the ticker while it runs (its caller records the parts it splits into)."""
        t = time.monotonic()
        with self._lock:
            outer, self._current, self._detail = self._current, (name, t), ""
        try:
            yield
        finally:
            with self._lock:
                if record:
                    self.phases[name] = round(self.phases.get(name, 0.0) + time.monotonic() - t, 2)
                self._current, self._detail = outer, ""

    def note(self, detail: str) -> None:
        """What the running phase is doing now (printed by the ticker)."""
        with self._lock:
            self._detail = detail

    def thread(self, name: str, seconds: float) -> None:
        """A worker thread's own phase (a drafter thread's compile and warm-up)."""
        with self._lock:
            self.threads[name] = round(self.threads.get(name, 0.0) + seconds, 2)

    def mark(self, name: str, at: float | None = None) -> None:
        """A moment (time.monotonic(); now by default), kept as seconds since the process began."""
        with self._lock:
            self.marks.setdefault(name, round((time.monotonic() if at is None else at) - self.origin, 2))

    def span(self, name: str, start: float, end: float) -> None:
        """A phase whose ends were measured elsewhere (time.monotonic() values)."""
        if end >= start:
            with self._lock:
                self.phases[name] = round(self.phases.get(name, 0.0) + end - start, 2)

    def record(self, training: str = "training") -> dict:
        """The final record's `phases`: seconds per phase in order, the per-thread warm-ups, the
        marks, the total and the share of it spent outside `training`."""
        total = round(time.monotonic() - self.origin, 2)
        with self._lock:
            phases, threads, marks = dict(self.phases), dict(self.threads), dict(self.marks)
        out: dict = {**phases, "total": total}
        if threads:
            out["warmup_by_thread"] = threads
        out.update(marks)
        if total > 0 and training in phases:
            out["outside_training_frac"] = round(1 - phases[training] / total, 3)
        return out

    def line(self, record: dict) -> str:
        """One line for the end of the run: each phase's seconds, then the marks."""
        skip = {"total", "warmup_by_thread", "outside_training_frac", *self.marks}
        parts = [f"{k} {v:.1f}s" for k, v in record.items() if k not in skip]
        tail = [f"{k.replace('_', ' ')} {record[k]:.1f}s" for k in self.marks if k in record]
        frac = record.get("outside_training_frac")
        if frac is not None:
            tail.append(f"{frac:.0%} of {record['total']:.0f}s outside training")
        return "timeline: " + ", ".join(parts) + ("; " + ", ".join(tail) if tail else "")


def pipeline_spans(tl: Timeline, start: float, end: float, opened: float | None, steps: list[float]) -> None:
    """Split the pipeline's time (time.monotonic() `start`..`end`) at the startup gate's opening
    and the first and last step times: warm-up (every drafter thread compiling and warming up),
    first step, training, shutdown."""
    if opened is None:
        tl.span("warmup", start, end)
        return
    tl.span("warmup", start, opened)
    tl.mark("gate_open_at", opened)
    if not steps:
        tl.span("first_step", opened, end)
        return
    tl.span("first_step", opened, steps[0])
    tl.mark("first_step_at", steps[0])
    tl.span("training", steps[0], steps[-1])
    tl.span("shutdown", steps[-1], end)
