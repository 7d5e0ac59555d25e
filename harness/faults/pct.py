"""PCT over the named points: the plan data (`Pct`) and the engine that runs it in the child
(`PctEngine`), after Burckhardt, Kothari, Musuvathi and Nagarakatte, "A randomized scheduler with
probabilistic guarantees of finding bugs" (ASPLOS 2010).

PCT gives every thread a random distinct priority, draws d-1 change points uniformly over the
first k steps, always runs the highest-priority enabled thread, and at the i-th change point drops
the running thread's priority to i, below every initial one. One run then finds a bug of depth d
with probability at least 1/(n k^(d-1)) (n threads, k steps): `bound(n, k, d)`.

Here a step is one hit of a named point (both sides of a torch point, harness.faults.points; the
trainer's stage points), and CPython threads cannot be scheduled strictly, so this is PCT over the
named points, approximated:

- A thread arriving at a point waits there while a thread of higher priority is *runnable*:
  alive, and either waiting at a point itself or having hit a point within `idle_s`. A thread
  with no hit for idle_s is taken to be blocked (in torch, on a lock, asleep, in join) and stops
  holding others back; one that computes longer than idle_s between points is misjudged so.
- No wait lasts longer than `wait_s`, so a higher thread blocked on a lock that a parked lower
  thread holds costs at most wait_s per point, never a deadlock.
- Priorities hold for the first k steps only, then nobody waits (FairPCT's hybrid, Lockstep and
  Coyote): a higher thread that loops until a lower one finishes (a tracer, a resetter) would
  otherwise starve it to one step per wait_s for the rest of the run.
- Between two points threads run as the interpreter switches them: the order is PCT's only at
  the points, and only as far as the waits hold.
- Priorities come from (seed, thread name), not arrival order, and change points are steps of
  the process's hit count drawn from (seed, k, d); the log names the thread, point, side and hit
  each change fell on, and `pinned` (filled from that log by `pinned_from_log`) moves the changes
  to those hits, so a replay demotes the same thread at the same hit wherever the run delivers it.
  Threads are told apart by name, as every decision of the scheduler is.
- Depth 0 counts the steps and threads and does nothing else: the calibration of k and n.

Threads get their priority when they reach the plan's start barrier, or else at their first hit.
"""

from __future__ import annotations

import fnmatch
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.runtime.errors import UserInputError

MAX_DEPTH = 8
POLLS_PER_IDLE = 4
"""A waiting thread looks again every idle_s / 4: staleness and deaths change runnability without
a notification, and each look takes the GIL from the running thread."""


class InvalidPct(UserInputError):
    """A PCT configuration that cannot run (the scheduler reports it as an invalid plan)."""


@dataclass(kw_only=True, slots=True)
class Pct:
    depth: int
    """d: d-1 priority change points. 0 counts steps only (calibration)."""
    steps: int
    """k: the change points are drawn over steps 1..k."""
    wait_s: float = 0.1
    """No wait at a point lasts longer than this."""
    idle_s: float = 0.02
    """A thread with no point hit for this long is not runnable (taken to be blocked). Longer
    than the OS leaves a runnable thread off a loaded 2-core machine (5 ms was misjudged there)."""
    threads: str = "*"
    """fnmatch glob of the thread names that take part; others never wait nor hold back."""
    points: list[str] | None = None
    """The named points that are steps; None: every point."""
    pinned: list[list] | None = None
    """[thread, point, when, hit, priority] changes from a logged run; a list (even empty)
    replaces the drawn change steps (replay), None draws them."""

    def validate(self, known_points: tuple[str, ...]) -> None:
        if not 0 <= self.depth <= MAX_DEPTH:
            raise InvalidPct(f"pct depth must be 0..{MAX_DEPTH}, got {self.depth!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise InvalidPct(f"pct steps (k) must be an int >= 1, got {self.steps!r}")
        if not 0 < self.wait_s <= 10 or not 0 < self.idle_s <= self.wait_s:
            raise InvalidPct("pct needs 0 < idle_s <= wait_s <= 10 s")
        unknown = sorted(set(self.points or ()) - set(known_points))
        if unknown:
            raise InvalidPct(f"pct: unknown point(s) {', '.join(unknown)}")
        for pin in self.pinned or ():
            if not (isinstance(pin, list) and len(pin) == 5 and isinstance(pin[3], int)):
                raise InvalidPct(f"pct pinned change must be [thread, point, when, hit, priority], got {pin!r}")

    def describe(self) -> str:
        return f"pct(d={self.depth},k={self.steps}{',pinned' if self.pinned is not None else ''})"


def change_steps(seed: int, depth: int, steps: int) -> list[int]:
    """The steps of the d-1 change points; the i-th (from 1) sets priority i."""
    rng = random.Random(f"{seed}:pct:change:{depth}:{steps}")
    return rng.sample(range(1, steps + 1), min(max(depth - 1, 0), steps))


def initial_priority(seed: int, depth: int, thread: str) -> float:
    """In [d, d+1): above every change-point priority; the order of independent uniform draws
    is a uniform random permutation, and no arrival order enters."""
    return depth + random.Random(f"{seed}:pct:prio:{thread}").random()


def bound(n: int, k: int, d: int) -> float:
    """PCT's lower bound on finding a depth-d bug in one run: 1/(n k^(d-1))."""
    return 1.0 / (max(n, 1) * max(k, 1) ** max(d - 1, 0))


@dataclass(slots=True)
class _Thread:
    thread: threading.Thread
    priority: float
    last_hit: float
    waiting: bool = False
    hits: dict = field(default_factory=dict)


class PctEngine:
    """Runs one `Pct` in this process; `step(point, when)` is called at every hit of its points."""

    def __init__(
        self,
        cfg: Pct,
        seed: int,
        *,
        log: Callable[[dict], None],
        elapsed: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg, self.seed = cfg, seed
        # None: every point the process hits, torch's and the program's as it registers them.
        self.points = frozenset(cfg.points) if cfg.points else None
        self._log, self._elapsed, self._clock = log, elapsed, clock
        self._cond = threading.Condition()
        self._threads: dict[str, _Thread] = {}
        self._step = 0
        self._changes = {s: i for i, s in enumerate(change_steps(seed, cfg.depth, cfg.steps), 1)}
        self._pinned = None if cfg.pinned is None else {(t, p, w, h): prio for t, p, w, h, prio in cfg.pinned}
        self.waits = self.timeouts = 0
        self.waited_s = 0.0
        log(
            {
                "event": "pct",
                "depth": cfg.depth,
                "steps": cfg.steps,
                "pinned": cfg.pinned,
                "change_steps": sorted(self._changes) if cfg.pinned is None else None,
            }
        )

    def counts(self, point: str) -> bool:
        """Whether a hit of `point` is a step."""
        return self.points is None or point in self.points

    def takes_part(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.cfg.threads)

    def arrive(self, point: str = "start-barrier", when: str = "before", hit: int = 0) -> None:
        """Give the calling thread its priority now (the start barrier), if it has none."""
        me = threading.current_thread()
        if self.takes_part(me.name):
            with self._cond:
                self._state(me, point, when, hit)

    def _state(self, me: threading.Thread, point: str, when: str, hit: int) -> _Thread:
        """The thread's state; a thread seen for the first time gets its priority here."""
        st = self._threads.get(me.name)
        if st is None or st.thread is not me:
            prio = initial_priority(self.seed, self.cfg.depth, me.name) if self.cfg.depth else 0.0
            st = self._threads[me.name] = _Thread(thread=me, priority=prio, last_hit=self._clock())
            if self.cfg.depth:
                self._record(point, when, me.name, hit, "pct-priority", round(prio, 6))
        return st

    def step(self, point: str, when: str) -> None:
        me = threading.current_thread()
        if not self.takes_part(me.name):
            return
        with self._cond:
            self._step += 1
            step = self._step
            st = self._state(me, point, when, 1)
            hit = st.hits[(point, when)] = st.hits.get((point, when), 0) + 1
            st.last_hit = self._clock()
            if not self.cfg.depth:
                return
            change = self._changes.get(step) if self._pinned is None else self._pinned.get((me.name, point, when, hit))
            if change is not None:
                st.priority = float(change)
                self._record(point, when, me.name, hit, "pct-change", change, step=step)
                self._cond.notify_all()  # the threads it held back may go on
            if step <= self.cfg.steps:
                self._wait(st, point, when, hit, step)

    def _wait(self, st: _Thread, point: str, when: str, hit: int, step: int) -> None:
        """Caller holds the condition. Waits while a higher thread is runnable, at most wait_s."""
        start = self._clock()
        first = behind = self._higher(st, start)
        if behind is None:
            return
        st.waiting = True
        deadline = start + self.cfg.wait_s
        try:
            while behind is not None and (left := deadline - self._clock()) > 0:
                self._cond.wait(min(left, self.cfg.idle_s / POLLS_PER_IDLE))
                behind = self._higher(st, self._clock())
        finally:
            st.waiting = False
            st.last_hit = now = self._clock()
        self.waits += 1
        self.timeouts += behind is not None
        self.waited_s += now - start
        self._record(
            point,
            when,
            st.thread.name,
            hit,
            "pct-wait",
            first,
            step=step,
            waited_s=round(now - start, 6),
            released="timeout" if behind is not None else "free",
        )

    def _higher(self, me: _Thread, now: float) -> str | None:
        """A runnable thread of higher priority than `me`, by name (None: `me` may go)."""
        for name, other in self._threads.items():
            if other is me or other.priority <= me.priority or not other.thread.is_alive():
                continue
            if other.waiting or now - other.last_hit < self.cfg.idle_s:
                return name
        return None

    def _record(self, point: str, when: str, thread: str, hit: int, action: str, value, **extra) -> None:
        # The scheduler's decision-record shape, so harness.faults.scheduler.decisions reads it.
        self._log(
            {
                "point": point,
                "when": when,
                "thread": thread,
                "hit": hit,
                "rule": "pct",
                "action": action,
                "value": value,
                "t": round(self._elapsed(), 6),
            }
            | extra
        )

    def summary(self) -> dict:
        with self._cond:
            return {
                "depth": self.cfg.depth,
                "steps": self._step,
                "k": self.cfg.steps,
                "threads": sorted(self._threads),
                "waits": self.waits,
                "timeouts": self.timeouts,
                "waited_s": round(self.waited_s, 6),
            }


def pinned_from_log(text: str) -> list[list]:
    """The change points a logged run made (its plan log's text), as `Pct.pinned` entries."""
    pins = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the last line of a process that died writing it
            continue
        if rec.get("action") == "pct-change":
            pins.append([rec["thread"], rec["point"], rec["when"], rec["hit"], rec["value"]])
    return pins
