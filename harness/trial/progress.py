"""Whether a running trial makes progress, measured rather than inferred from its output.

A trial's process tree is busy when its processes together burn CPU: a compile, a busy child
(Inductor's ISA probe, its compile workers, a build), a spinning thread. It is idle when every
thread is blocked. Output and the heartbeat file say progress too, but a silent busy tree is not
hung (a 50-thread compile program sat 66-117 s without a line) and a deadlocked one that printed
a line at start is not progressing. `TreeClock` samples the CPU seconds of the trial's process
group from /proc (Linux; elsewhere it reads 0 and only output counts); `sample` tells the watcher
whether the tree used at least BUSY_FRACTION of one core since the previous sample.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

BUSY_FRACTION = 0.05
"""CPU seconds per wall second above which the tree counts as working. A deadlocked Python process
uses none; a polling loop with a 10 ms sleep about 1-3% of a core; a compile 100%."""
SAMPLE_S = 1.0
"""Seconds between CPU samples (one /proc scan each)."""
WINDOW_S = 30.0
"""How far back `recent_fraction` looks (a timed-out trial reports its CPU over this window)."""

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class Proc:
    state: str
    """/proc's state letter (`Z`: a zombie, waiting to be reaped)."""
    cpu_s: float
    """User + system seconds, plus what it collected from its waited-for children: a child that
    ran and was reaped still counts."""
    name: str


def group_processes(pgid: int, proc: Path = Path("/proc")) -> dict[int, Proc]:
    """pid -> Proc for the processes of group `pgid`, from /proc (Linux); {} elsewhere."""
    found = {}
    for entry in proc.glob("[0-9]*/stat"):
        try:
            head, tail = entry.read_text().rsplit(")", 1)
            fields = tail.split()
        except (OSError, ValueError):
            continue
        # After the command name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12) cutime(13) cstime(14)
        if len(fields) > 14 and int(fields[2]) == pgid:
            found[int(entry.parent.name)] = Proc(
                state=fields[0], cpu_s=sum(int(x) for x in fields[11:15]) / _TICK, name=head.split("(", 1)[-1]
            )
    return found


@dataclass(kw_only=True, slots=True)
class TreeClock:
    """CPU samples of one process group."""

    pgid: int
    samples: deque = field(default_factory=deque)
    """(monotonic time, CPU seconds), oldest first, WINDOW_S long."""
    last: dict = field(default_factory=dict)
    before: dict = field(default_factory=dict)
    """Per-process readings of the last two samples (group_processes)."""

    def sample(self, now: float) -> bool:
        """Take a sample; True when the tree was busy since the previous one."""
        self.before, self.last = self.last, group_processes(self.pgid)
        cpu = sum(p.cpu_s for p in self.last.values())
        busy = False
        if self.samples:
            t0, c0 = self.samples[-1]
            # A reaped orphan takes its seconds with it (init collects them): clamp at 0.
            busy = now > t0 and max(0.0, cpu - c0) >= BUSY_FRACTION * (now - t0)
        self.samples.append((now, cpu))
        while len(self.samples) > 2 and now - self.samples[0][0] > WINDOW_S:
            self.samples.popleft()
        return busy

    def recent_fraction(self) -> float | None:
        """Cores used on average over the kept window (None before two samples)."""
        if len(self.samples) < 2:
            return None
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        return max(0.0, c1 - c0) / (t1 - t0) if t1 > t0 else None

    def busiest(self) -> str:
        """The process that used the most CPU between the last two samples (`pid 7 cc1plus`)."""
        deltas = [
            (p.cpu_s - (self.before[pid].cpu_s if pid in self.before else 0.0), pid, p.name)
            for pid, p in self.last.items()
        ]
        if not deltas or max(deltas)[0] <= 0:
            return ""
        _, pid, name = max(deltas)
        return f"pid {pid} {name}"
