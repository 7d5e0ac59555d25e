"""Seeded fault-injecting scheduler: plans and the in-process decision engine.

A `Plan` is plain data (JSON round-trip, validated): a seed, a switch interval, an optional start
barrier and `Rule`s that say what to do at named points: torch points (harness.faults.points) and
the program's own `stage.event` points, registered with harness.runtime.failpoints by the modules
the plan names in `points_from` (the trainer's: `dflash.fault_points`).
`harness.faults.profiles.plan_from_seed(seed, profile)` derives one from a named profile.

`Scheduler` executes a plan inside the child process (installed by bootstrap/sitecustomize.py):

- Every decision draws from `random.Random(f"{seed}:{point}:{thread}:{hit}")`, with `hit` the
  per-(point, thread) hit index, so a replay makes the same decisions wherever the interleaving
  delivers the same hits to the same thread names (the idea of Shuttle's RandomDataSource,
  awslabs/shuttle). String seeds hash with SHA-512, so PYTHONHASHSEED does not matter.
- Injected time is budgeted as in rr chaos mode ("Deeper Into Chaos": perturbation capped at 20%
  of the run so it does not cause false timeouts): a delay or starvation that would push the total
  over `budget_fraction * elapsed + BUDGET_GRACE_S` is skipped and counted.
- Starvation follows rr chaos: a thread is "low priority" with a probability drawn from
  (seed, thread name), and only low-priority threads are starved, for a duration picked from
  doublings of 1 ms.
- Every injected or skipped decision is appended to the HARNESS_PLAN_LOG jsonl file.
- A plan's `pct` runs PCT over the named points (harness.faults.pct): priorities, change points
  and bounded waits at every point hit, besides the rules.
"""

from __future__ import annotations

import atexit
import fnmatch
import importlib
import json
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from harness.faults import points
from harness.faults.pct import Pct, PctEngine
from harness.faults.points import TORCH_POINTS
from harness.runtime.errors import InjectedFault, UserInputError
from harness.runtime.failpoints import registered_points

ENV_PLAN = "HARNESS_PLAN"
ENV_PLAN_LOG = "HARNESS_PLAN_LOG"
ACTIONS = ("delay", "yield", "starve", "raise")
WHENS = ("before", "after")
DISTS = ("uniform", "exponential")
BUDGET_GRACE_S = 0.5  # lets the first injections happen before the budget has accrued
STARVE_MS = tuple(2**i for i in range(12))  # 1 ms .. 2048 ms, rr chaos's 12 doublings


class InvalidPlan(UserInputError):
    """A plan that cannot be executed (unknown point/action, bad probability, ...)."""


STORED_POINTS_FROM = ("dflash.fault_points",)
"""What a plan without `points_from` that names unregistered points reads as: plans stored before
the field named the trainer's points only."""


def all_points() -> tuple[str, ...]:
    """Torch's points and every program point registered in this process so far."""
    return tuple(TORCH_POINTS) + registered_points()


@dataclass(kw_only=True, slots=True)
class Rule:
    point: str
    """Point name: one of harness.faults.points.TORCH_POINTS or a registered program point."""
    action: str
    """One of delay | yield | starve | raise."""
    when: str = "before"
    """Before or after the real call (program points only have `before`)."""
    probability: float = 1.0
    """Chance that an eligible hit injects."""
    params: dict = field(default_factory=dict)
    """delay: {dist: uniform, max_s} | {dist: exponential, mean_s, cap_s}; starve: {thread_p,
    victim, max_ms}; raise: {message}."""
    threads: str = "*"
    """fnmatch glob on the thread name."""
    first_hit: int = 1
    """Hits of this point in this thread before `first_hit` are never eligible (1-based)."""
    max_hits: int | None = None
    """At most this many injections by this rule in the process."""

    def validate(self) -> None:
        if self.point not in all_points():
            raise InvalidPlan(f"unknown point {self.point!r} (known: {', '.join(all_points())})")
        if self.action not in ACTIONS:
            raise InvalidPlan(f"unknown action {self.action!r} at {self.point} (known: {ACTIONS})")
        if self.when not in WHENS:
            raise InvalidPlan(f"unknown when {self.when!r} at {self.point} (known: {WHENS})")
        if self.when == "after" and self.point not in TORCH_POINTS:
            raise InvalidPlan(f"program point {self.point} has no 'after' side")
        if not 0.0 <= float(self.probability) <= 1.0:
            raise InvalidPlan(f"bad probability {self.probability!r} at {self.point}: need 0..1")
        if self.first_hit < 1 or (self.max_hits is not None and self.max_hits < 0):
            raise InvalidPlan(f"bad first_hit/max_hits at {self.point}")
        _validate_params(self)


def _validate_params(rule: Rule) -> None:
    p = rule.params
    if rule.action == "delay":
        dist = p.get("dist", "uniform")
        if dist not in DISTS:
            raise InvalidPlan(f"unknown delay dist {dist!r} at {rule.point} (known: {DISTS})")
        key = "max_s" if dist == "uniform" else "mean_s"
        if not isinstance(p.get(key), (int, float)) or not 0 < p[key] <= 10:
            raise InvalidPlan(f"delay at {rule.point} needs {key} in (0, 10] s, got {p.get(key)!r}")
    elif rule.action == "starve":
        if not 0.0 <= float(p.get("thread_p", 0.1)) <= 1.0:
            raise InvalidPlan(f"starve at {rule.point}: thread_p must be in 0..1")
        if int(p.get("max_ms", 256)) not in STARVE_MS:
            raise InvalidPlan(f"starve at {rule.point}: max_ms must be one of {STARVE_MS}")
        victim = p.get("victim")
        if victim is not None and (not isinstance(victim, int) or victim < 1):
            raise InvalidPlan(f"starve at {rule.point}: victim must be an int >= 1 (arrival order)")


@dataclass(kw_only=True, slots=True)
class StartBarrier:
    threads: str
    """Glob of thread names that wait for each other when they start."""
    count: int
    """Number of threads the barrier releases together."""
    timeout_s: float = 5.0
    """After this the barrier breaks and every waiter goes on: it can never deadlock."""


@dataclass(kw_only=True, slots=True)
class Plan:
    seed: int
    """Seeds both the profile's choices and every runtime decision."""
    profile: str = "custom"
    """Profile the plan came from (informational)."""
    switch_interval: float | None = None
    """sys.setswitchinterval value applied at start-up (None: leave the default 5 ms)."""
    start_barrier: StartBarrier | None = None
    """Release matching threads together (pytest-run-parallel style)."""
    rules: list[Rule] = field(default_factory=list)
    """What to inject where."""
    budget_fraction: float = 0.2
    """Cap on injected sleep time as a fraction of elapsed time (rr chaos: 20%)."""
    pct: Pct | None = None
    """PCT over the named points (harness.faults.pct); its waits are not budgeted: each is bounded."""
    points_from: tuple[str, ...] = ()
    """Modules that register the program points the plan names, imported before its rules are
    checked: a plan is read before the program runs (the trial bootstrap)."""

    def validate(self) -> Plan:
        named = {r.point for r in self.rules} | set((self.pct.points or ()) if self.pct else ())
        stored = not self.points_from and not named <= set(all_points())
        for module in STORED_POINTS_FROM if stored else self.points_from:
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise InvalidPlan(f"points_from: cannot import {module}: {e}") from None
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise InvalidPlan(f"seed must be an int, got {self.seed!r}")
        if self.switch_interval is not None and not 0 < self.switch_interval <= 1:
            raise InvalidPlan(f"bad switch_interval {self.switch_interval!r}: need (0, 1] s")
        if not 0 <= self.budget_fraction <= 1:
            raise InvalidPlan(f"bad budget_fraction {self.budget_fraction!r}: need 0..1")
        b = self.start_barrier
        if b is not None and (b.count < 1 or not 0 < b.timeout_s <= 600):
            raise InvalidPlan("start_barrier needs count >= 1 and 0 < timeout_s <= 600")
        for rule in self.rules:
            rule.validate()
        if self.pct is not None:
            try:
                self.pct.validate(all_points())
            except ValueError as e:
                raise InvalidPlan(str(e)) from None
        return self

    def torch_points(self) -> list[str]:
        wanted = {r.point for r in self.rules}
        if self.pct is not None:
            wanted |= set(self.pct.points or TORCH_POINTS)
        return sorted(wanted & set(TORCH_POINTS))

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.points_from:
            d["points_from"] = list(self.points_from)
        else:
            del d["points_from"]  # a plan without program points reads as before the field
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        if not isinstance(data, dict):
            raise InvalidPlan(f"plan must be a JSON object, got {type(data).__name__}")
        try:
            d = dict(data)
            d["rules"] = [Rule(**r) for r in d.get("rules", [])]
            d["points_from"] = tuple(d.get("points_from", ()))
            if d.get("start_barrier") is not None:
                d["start_barrier"] = StartBarrier(**d["start_barrier"])
            if d.get("pct") is not None:
                d["pct"] = Pct(**d["pct"])
            plan = cls(**d)
        except TypeError as e:
            raise InvalidPlan(f"bad plan field: {e}") from None
        return plan.validate()

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidPlan(f"plan is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def describe(self) -> str:
        """One line for logs and failure reports."""
        parts = [f"seed={self.seed}", f"profile={self.profile}"]
        if self.switch_interval is not None:
            parts.append(f"switch={self.switch_interval:g}")
        if self.start_barrier is not None:
            parts.append(f"barrier={self.start_barrier.threads}x{self.start_barrier.count}")
        if self.pct is not None:
            parts.append(self.pct.describe())
        parts += [f"{r.action}@{r.point}:{r.when}(p={r.probability:g})" for r in self.rules]
        return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# Runtime: decisions, budget, log.


class Scheduler:
    """Executes one Plan in this process. `hit(point, when)` is the hook the wrappers call."""

    def __init__(self, plan: Plan, *, log_path: str | None = None, clock=time.monotonic, sleep=time.sleep) -> None:
        self.plan = plan
        self._clock, self._sleep = clock, sleep
        self._t0 = clock()
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], list[tuple[int, Rule]]] = {}
        for i, rule in enumerate(plan.rules):
            self._by_key.setdefault((rule.point, rule.when), []).append((i, rule))
        self._thread_hits: dict[tuple[str, str, str], int] = {}
        self._fired = [0] * len(plan.rules)
        self._arrivals: dict[str, int] = {}  # thread -> order of its first starve-rule hit
        self.hits: dict[str, int] = {}
        self.injected_s = 0.0
        self.num_injected = 0
        self.num_skipped_budget = 0
        self._log = open(log_path, "a", buffering=1, encoding="ascii") if log_path else None
        self.pct = (
            PctEngine(plan.pct, plan.seed, log=self.log, elapsed=self.elapsed, clock=clock)
            if plan.pct is not None
            else None
        )

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def log(self, record: dict) -> None:
        if self._log is not None:
            self._log.write(json.dumps(record, sort_keys=True) + "\n")

    def hit(self, point: str, when: str = "before") -> None:
        if self.pct is not None and when in WHENS and self.pct.counts(point):
            self.pct.step(point, when)
        rules = self._by_key.get((point, when))
        if when == "before":
            self.hits[point] = self.hits.get(point, 0) + 1
        if not rules:
            return
        thread = threading.current_thread().name
        with self._lock:
            key = (point, when, thread)
            index = self._thread_hits.get(key, 0) + 1
            self._thread_hits[key] = index
        for i, rule in rules:
            self._apply(i, rule, point, when, thread, index)

    def stage_handler(self, name: str) -> None:
        """harness.runtime.failpoints handler: fn(name) -> None."""
        self.hit(name, "before")

    def _apply(self, i: int, rule: Rule, point: str, when: str, thread: str, index: int) -> None:
        if index < rule.first_hit or not fnmatch.fnmatchcase(thread, rule.threads):
            return
        if rule.max_hits is not None and self._fired[i] >= rule.max_hits:
            return
        rng = random.Random(f"{self.plan.seed}:{point}:{when}:{thread}:{index}:{i}")
        if rng.random() >= rule.probability:
            return
        value = self._draw(rule, rng, thread)
        if value is None:  # starve on a thread that is not low priority
            return
        record = {
            "point": point,
            "when": when,
            "thread": thread,
            "hit": index,
            "rule": i,
            "action": rule.action,
            "value": value,
            "t": round(self.elapsed(), 6),
        }
        if rule.action in ("delay", "starve") and not self._reserve(value):
            self.num_skipped_budget += 1
            self.log(record | {"action": "skip-budget"})
            return
        with self._lock:
            self._fired[i] += 1
            self.num_injected += 1
        self.log(record)
        self._perform(rule, value)

    def _draw(self, rule: Rule, rng: random.Random, thread: str) -> float | None:
        p = rule.params
        if rule.action == "delay":
            if p.get("dist", "uniform") == "uniform":
                return rng.uniform(0.0, p["max_s"])
            return min(rng.expovariate(1.0 / p["mean_s"]), p.get("cap_s", 10 * p["mean_s"]))
        if rule.action == "starve":
            if not self._low_priority(thread, p):
                return None
            return rng.choice([ms for ms in STARVE_MS if ms <= p.get("max_ms", 256)]) / 1000.0
        return 0.0

    def _low_priority(self, thread: str, params: dict) -> bool:
        """rr chaos: each thread is low priority with probability thread_p, drawn from (seed,
        thread name). With the two or three threads of a repro that often starves nobody, so
        `victim: k` also makes the k-th distinct thread picked at a starve point low priority."""
        with self._lock:
            order = self._arrivals.setdefault(thread, len(self._arrivals) + 1)
        if params.get("victim") == order:
            return True
        return random.Random(f"{self.plan.seed}:prio:{thread}").random() < params.get("thread_p", 0.1)

    def _reserve(self, seconds: float) -> bool:
        with self._lock:
            allowed = self.plan.budget_fraction * self.elapsed() + BUDGET_GRACE_S
            if self.injected_s + seconds > allowed:
                return False
            self.injected_s += seconds
            return True

    def _perform(self, rule: Rule, value: float) -> None:
        if rule.action == "raise":
            # The trainer's own type, so that its error reporting recognises the fault.
            raise InjectedFault(rule.params.get("message", f"harness raise at {rule.point}"))
        # yield: sleep(0) releases the GIL so a waiting thread can take it.
        self._sleep(value if rule.action != "yield" else 0)

    def summary(self) -> dict:
        wanted = set(self.plan.torch_points())
        return {
            "event": "summary",
            "hits": dict(self.hits),
            "installed": points.installed(),
            # Lazy install: a point is missing here when its module was never imported by
            # the program (not reached) or none of its targets exists (unavailable).
            "not_installed": sorted(wanted - set(points.installed())),
            "injected": self.num_injected,
            "injected_s": round(self.injected_s, 6),
            "skipped_budget": self.num_skipped_budget,
            "elapsed_s": round(self.elapsed(), 6),
        } | ({"pct": self.pct.summary()} if self.pct is not None else {})

    def close(self) -> None:
        self.log(self.summary())
        if self._log is not None:
            self._log.close()
            self._log = None


def decisions(log_path: str) -> list[tuple]:
    """The decision sequence of a plan log (no timestamps), for replay comparisons."""
    out = []
    with open(log_path, encoding="ascii") as f:
        for line in f:
            rec = json.loads(line)
            if "action" in rec:
                out.append(
                    (rec["point"], rec["when"], rec["thread"], rec["hit"], rec["rule"], rec["action"], rec["value"])
                )
    return out


# ---------------------------------------------------------------------------------------------
# Installation in the child (called by bootstrap/sitecustomize.py).

_active: Scheduler | None = None


def active() -> Scheduler | None:
    return _active


def load_plan(value: str) -> Plan:
    """HARNESS_PLAN holds a path to a plan JSON file, or the JSON itself."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            with open(value, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidPlan(f"cannot read plan file {value!r}: {e.strerror}") from None
    return Plan.from_json(text)


def install(plan: Plan, *, log_path: str | None = None) -> Scheduler:
    """Apply `plan` to this process: switch interval, start barrier, torch points, stage points."""
    global _active
    if _active is not None:
        raise RuntimeError("a harness plan is already installed in this process")
    sched = Scheduler(plan, log_path=log_path)
    sched.log({"event": "plan", "plan": plan.to_dict(), "pid": os.getpid()})
    if plan.switch_interval is not None:
        sys.setswitchinterval(plan.switch_interval)
    if plan.start_barrier is not None:
        _install_start_barrier(plan.start_barrier, sched)
    points.install_lazily(plan.torch_points(), sched.hit)
    # Composed with the exposure probes' handler (harness.runtime.failpoints takes one), once it is loaded.
    points.add_stage_handler(sched.stage_handler)
    atexit.register(sched.close)
    _active = sched
    return sched


def _install_start_barrier(cfg: StartBarrier, sched: Scheduler) -> None:
    """Matching threads wait for each other right before their run(); the barrier breaks after
    cfg.timeout_s, so a missing thread costs time but never deadlocks."""
    barrier = threading.Barrier(cfg.count, timeout=cfg.timeout_s)
    joined = iter(range(cfg.count))  # next() on a range iterator is atomic under the GIL
    original = threading.Thread._bootstrap_inner

    def bootstrap_inner(self):
        if fnmatch.fnmatchcase(self.name, cfg.threads) and next(joined, None) is not None:
            run = self.run

            def run_after_barrier():
                if sched.pct is not None:  # PCT: a thread's priority is set as it reaches the barrier
                    sched.pct.arrive()
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    sched.log({"event": "barrier-broken", "thread": self.name, "t": round(sched.elapsed(), 6)})
                run()

            self.run = run_after_barrier
        original(self)

    # _bootstrap_inner (3.11-3.13) runs after start() has been acknowledged, so waiting inside
    # run() never blocks the thread that called start().
    threading.Thread._bootstrap_inner = bootstrap_inner
