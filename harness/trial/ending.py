"""How a run ended, as its supervisor saw it: what the classification reads besides the output."""

from __future__ import annotations

from dataclasses import dataclass

from harness.trial import hangs

HANG_CONFIRM_S = 2.0
"""A suspected hang is dumped, then looked at again this much later: HANG only when the tree
stayed idle and silent and every thread stood at the same Python frames both times."""


@dataclass(kw_only=True, slots=True)
class Ending:
    how: str  # "exited" | "hang" | "timeout"
    elapsed_s: float
    last_progress_s: float
    dump: hangs.HangDump | None = None
    survivors: tuple[int, ...] = ()
    """Live members of the group after SIGKILL and GROUP_GONE_TIMEOUT_S (should never be)."""
    members: frozenset[int] | None = None
    """GPU hosts only: every pid of the group the runner saw (the child's included)."""
    gpu_mem_gib: float | None = None
    """GPU hosts only: the most the group's pids held on one GPU in the samples."""
    gpu_mem_error: str | None = None
    """The sampler's exception, if it stopped on one (`MemorySampler.error`)."""
    cores: float | None = None
    """Cores the tree used on average over the last progress.WINDOW_S before the end."""
    busiest: str = ""
    """The busiest process of the tree over the last sample (`pid 123 cc1plus`)."""
    resolved: int = 0
    """Suspected hangs that the second look showed moving (idle, then busy or at other frames)."""
