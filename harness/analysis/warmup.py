"""What a compiled trainer run costs before it pays off: a trainer log's `metrics` and `final`
lines read into a small summary, and the break-even step count of a run against a baseline run.

    python -m harness warmup BASE.log RUN.log [RUN.log ...]

A run is modelled as warm-up + tokens / pace. The pace is tokens per second over the trainer's
steady window (the second half of the run's steps, as `tokens_per_s_steady`), leaving out pauses
(a step that took over PAUSE_FACTOR times the window's median step: a compile or CUDA-graph
recording for a shape first seen late) where the log has a metrics line for every step
(`--set train.log_interval_s=0`); elsewhere the pace is the trainer's steady figure. The warm-up
is what the run spent over that pace. Work is counted in tokens, so runs whose steps hold
different numbers of batches (one drafter thread against three) compare; the break-even is
given in the run's own steps.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.runtime.errors import UserInputError

PAUSE_FACTOR = 10.0
"""A step this many times slower than the window's median is a one-off (a compile), not pace."""

_EVENT = re.compile(r'\{"event": ')


class WarmupError(UserInputError):
    """Bad input (a missing log, a log without metrics lines): one `error:` line, exit 2."""


@dataclass(frozen=True, slots=True)
class Pause:
    step: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RunSummary:
    name: str
    steps: int
    steps_this_run: int
    """Fewer than `steps` when the run resumed from a checkpoint; the times count these alone."""
    first_step_s: float | None
    """Seconds from the startup gate to this run's first step; None when the log skipped it."""
    elapsed_s: float
    """Seconds from the startup gate to the last step."""
    tokens: int
    steady_tokens_per_s: float | None
    """The trainer's own figure (its steady window, pauses included); None under 4 steps."""
    pace_tokens_per_s: float | None
    step_s: float | None
    """Seconds per step at the pace (the steady window's steps, pauses left out)."""
    pauses: tuple[Pause, ...] | None
    """Steps left out of the pace; None when the log does not show every step of the window."""
    torch: str | None
    drafter_threads: int | None

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps_this_run

    @property
    def warmup_s(self) -> float | None:
        if not self.pace_tokens_per_s:
            return None
        return self.elapsed_s - self.tokens / self.pace_tokens_per_s


def events(text: str) -> list[dict]:
    """Every JSON event in a log; the progress bar shares the file, so a line may start mid-text."""
    found, decoder = [], json.JSONDecoder()
    for m in _EVENT.finditer(text):
        try:
            found.append(decoder.raw_decode(text, m.start())[0])
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run
    return found


def read(path: Path) -> RunSummary:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise WarmupError(f"{path}: cannot read the log ({e.strerror or e})") from None
    found = events(text)
    metrics = {
        e["step"]: e for e in found if e.get("event") == "metrics" and {"step", "elapsed_s", "tokens_per_s"} <= e.keys()
    }
    if not metrics:
        raise WarmupError(f'{path}: no trainer metrics lines ({{"event": "metrics", ...}}) in it')
    final = next((e for e in reversed(found) if e.get("event") == "final"), None)
    return summarise(path.stem, metrics, final)


def _tokens(e: dict) -> int:
    # The trainer logs tokens/s since the gate; times elapsed gives its token count back.
    return round(e["tokens_per_s"] * e["elapsed_s"])


def summarise(name: str, metrics: dict[int, dict], final: dict | None) -> RunSummary:
    last_step = max(metrics)
    if final is not None and not {"steps", "elapsed_s", "tokens_per_s"} <= final.keys():
        final = None  # not the trainer's final line: read the run from its metrics lines
    steps = final["steps"] if final else last_step
    this_run = final.get("steps_this_run", steps) if final else last_step
    first = steps - this_run + 1
    end = metrics.get(steps) or final or metrics[last_step]
    steady = (final or metrics[last_step]).get("tokens_per_s_steady")
    tokens = _tokens(end)
    pace, step_s, pauses = _pace(metrics, steps - this_run + this_run // 2, steps)
    if pace is None and steady:
        pace, step_s = steady, tokens / this_run / steady
    plan = (final or {}).get("device_plan") or {}
    return RunSummary(
        name=name,
        steps=steps,
        steps_this_run=this_run,
        first_step_s=metrics[first]["elapsed_s"] if first in metrics else None,
        elapsed_s=end["elapsed_s"],
        tokens=tokens,
        steady_tokens_per_s=steady,
        pace_tokens_per_s=pace,
        step_s=step_s,
        pauses=pauses,
        torch=(final or {}).get("torch"),
        drafter_threads=len(plan["drafter"]) if "drafter" in plan else None,
    )


def _pace(
    metrics: dict[int, dict], start: int, end: int
) -> tuple[float | None, float | None, tuple[Pause, ...] | None]:
    """Tokens/s and s/step over steps start..end, pauses left out; Nones unless every step is logged."""
    if end - start < 2 or any(s not in metrics for s in range(start, end + 1)):
        return None, None, None
    steps = [
        (s, metrics[s]["elapsed_s"] - metrics[s - 1]["elapsed_s"], _tokens(metrics[s]) - _tokens(metrics[s - 1]))
        for s in range(start + 1, end + 1)
    ]
    limit = PAUSE_FACTOR * statistics.median(dt for _, dt, _ in steps)
    kept = [(dt, n) for _, dt, n in steps if dt <= limit]
    seconds = sum(dt for dt, _ in kept)
    pauses = tuple(Pause(s, round(dt, 3)) for s, dt, _ in steps if dt > limit)
    if seconds <= 0:
        return None, None, pauses
    return sum(n for _, n in kept) / seconds, seconds / len(kept), pauses


def break_even(run: RunSummary, base: RunSummary) -> int | None:
    """The step count of `run` from which it has spent less wall time than `base` would for the
    same tokens; None when `run` is not faster per token (never). Both must have a pace."""
    if run.pace_tokens_per_s is None or base.pace_tokens_per_s is None:
        raise WarmupError(
            f"{run.name if run.pace_tokens_per_s is None else base.name}: too few steps for a steady pace"
        )
    if run.pace_tokens_per_s <= base.pace_tokens_per_s:
        return None
    saved_per_token = 1 / base.pace_tokens_per_s - 1 / run.pace_tokens_per_s
    tokens = (run.warmup_s - base.warmup_s) / saved_per_token
    if tokens < 0:
        return 0
    return math.floor(tokens / run.tokens_per_step) + 1


COLUMNS = (
    "run",
    "torch",
    "drafter threads",
    "first step s",
    "total s",
    "steady tok/s",
    "pace tok/s",
    "step ms",
    "x base",
    "warm-up s",
    "break-even steps",
    "pauses left out",
)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pauses(p: tuple[Pause, ...] | None) -> str:
    if p is None:
        return "? (not every step logged)"
    shown = ", ".join(f"{x.seconds:.2f} s @{x.step}" for x in p[:3])
    return (shown + (f" +{len(p) - 3}" if len(p) > 3 else "")) or "none"


def row(run: RunSummary, base: RunSummary) -> str:
    paced = run.pace_tokens_per_s is not None and base.pace_tokens_per_s is not None
    if run is base:
        even = "base"
    elif not paced:
        even = "?"
    else:
        n = break_even(run, base)
        even = "never" if n is None else str(n)
    ratio = run.pace_tokens_per_s / base.pace_tokens_per_s if paced else None
    cells = (
        run.name,
        run.torch or "?",
        "?" if run.drafter_threads is None else str(run.drafter_threads),
        _num(run.first_step_s, ".2f"),
        _num(run.elapsed_s, ".2f"),
        _num(run.steady_tokens_per_s, ",.0f"),
        _num(run.pace_tokens_per_s, ",.0f"),
        _num(run.step_s and 1000 * run.step_s, ".1f"),
        _num(ratio, ".2f"),
        _num(run.warmup_s, ".2f"),
        even,
        _pauses(run.pauses),
    )
    return "| " + " | ".join(cells) + " |"


def table(base: RunSummary, runs: list[RunSummary]) -> str:
    """The base first, then each run against it; x base and the break-even are on the pace."""
    head = "| " + " | ".join(COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    return "\n".join([head, rule, row(base, base), *(row(r, base) for r in runs)])
