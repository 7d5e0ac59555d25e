"""A generated program's shape: how its threads start, how a failure is reported, which fault it
carries and how it ends.

Each part's values are listed simplest first: hypothesis's `sampled_from` shrinks toward the first,
so a wrong verdict shrinks to the plainest program that still shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

STARTS = ("thread", "executor-map", "executor-submit", "to-thread", "daemon", "child")
REPORTS = ("default-hook", "logging", "swallowed", "exception-group", "retry", "own-excepthook", "future-logged")
FAULTS = ("none", "deterministic", "F2", "R4", "dict-mutation", "R5")
GPU_FAULTS = ("reduce-overhead", "capture-beside-eager", "autograd")
"""Faults that need CUDA: a mode="reduce-overhead" model called from worker threads, eager CUDA
work beside another thread's graph capture, and training steps (backward) in worker threads."""
ENDINGS = ("exit-0", "exit-code", "thread-sys-exit", "os-exit", "non-daemon-wait")
PARTS = {"start": STARTS, "report": REPORTS, "fault": FAULTS, "ending": ENDINGS}
GPU_PARTS = {**PARTS, "fault": GPU_FAULTS}

HOOK_STARTS = ("thread", "daemon", "child")
"""Starts whose workers are threads the program made: only there does a threading.excepthook see
the worker's death (a pool keeps it in a Future, asyncio in the awaited task)."""


@dataclass(frozen=True, order=True)
class Shape:
    start: str = "thread"
    report: str = "default-hook"
    fault: str = "none"
    ending: str = "exit-0"

    def __post_init__(self) -> None:
        for part, values in PARTS.items():
            values = values + GPU_FAULTS if part == "fault" else values
            if getattr(self, part) not in values:
                raise ValueError(f"{part} {getattr(self, part)!r} is not one of {', '.join(values)}")

    @property
    def gpu(self) -> bool:
        return self.fault in GPU_FAULTS

    @property
    def name(self) -> str:
        return f"{self.start}.{self.report}.{self.fault}.{self.ending}".replace("-", "_")

    def why_invalid(self) -> str:
        """Why this combination is no program ('' where it is one)."""
        if self.report == "future-logged" and self.start != "executor-submit":
            return "future-logged reads Futures, which only executor-submit keeps"
        if self.report == "own-excepthook" and self.start not in HOOK_STARTS:
            return "own-excepthook sees only threads the program started itself"
        return ""


def parse(text: str) -> Shape:
    """`start.report.fault.ending` (a Shape's name, dashes or underscores) as a Shape."""
    parts = text.replace("_", "-").split(".")
    if len(parts) != 4:
        raise ValueError(f"shape {text!r}: expected start.report.fault.ending")
    shape = Shape(*parts)
    if shape.why_invalid():
        raise ValueError(f"shape {text!r}: {shape.why_invalid()}")
    return shape


def valid_shapes() -> list[Shape]:
    """Every valid combination, simplest first."""
    return [
        s
        for s in (Shape(a, b, c, d) for a in STARTS for b in REPORTS for c in FAULTS for d in ENDINGS)
        if not s.why_invalid()
    ]
