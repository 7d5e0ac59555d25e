"""Named fault points (`stage.event`), off unless a handler or a plan is installed.

Modelled on tikv/fail-rs (named points, `FAILPOINTS=name=[p%][cnt*]task(arg)`) and ClickHouse's
ThreadFuzzer (off unless configured; sleeps and yields next to synchronization points).

Key properties:
- The program names its points (`register_points`, before a plan is parsed); a plan naming
  another point is refused.
- `fault_point(name)` costs one module-global read and a `None` test when nothing is installed;
  it sits on hot paths (a trainer's every channel hand-off and step).
- Two sources can be installed at once and are chained: the harness scheduler's handler
  (`set_handler`) runs first, then the `HARNESS_FAULTS` plan (`install_from_env`).
- A plan is repeatable: its probabilities draw from one `random.Random(HARNESS_FAULTS_SEED)`
  (default 0) under a lock. Which thread draws first still depends on scheduling.

Grammar: `HARNESS_FAULTS="rule;rule;..."`, `rule = name[@thread-glob]=[p%][cnt*]task[(arg)]`,
tasks `off`, `raise[(message)]`, `delay(ms)` (sleeps: a thread blocked in a C call that releases
the GIL), `spin(ms)` (a busy Python loop: a thread in a long compile, holding the GIL between
switch intervals; neither looks at the pipeline's stop event), `yield`, and `corrupt[(factor)]`
(every floating tensor the point holds times factor, default 0, autograd graph kept: a silent
wrong value, finite and without an exception, as a stale buffer or another thread's output would
be; only at value points, which pass their value through `fault_value`). `@glob` limits a rule to
threads whose name matches (`fnmatch`). For one point the first rule that matches the thread and
still has count left decides; its probability is then rolled.
"""

from __future__ import annotations

import fnmatch
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from harness.runtime.errors import ConfigError, InjectedFault

TASKS = ("off", "raise", "delay", "spin", "yield", "corrupt")
ENV_PLAN = "HARNESS_FAULTS"
ENV_SEED = "HARNESS_FAULTS_SEED"

Handler = Callable[[str], None]

# The one global that fault_point reads; rebuilt by _recompose() from the two sources below.
_handler: Handler | None = None
_external: Handler | None = None
_plan: FaultPlan | None = None
_install_lock = threading.Lock()
# The program's points, name -> whether it holds a value (`fault_value`): what a plan may name.
_registered: dict[str, bool] = {}
_POINT_NAME = re.compile(r"^[\w-]+\.[\w-]+$")
# A `corrupt` rule that fired in this thread, for the fault_value call that ran it: (point, factor).
_corrupting = threading.local()


def register_points(names: Iterable[str], *, value_points: Iterable[str] = ()) -> None:
    """Add a program's point names (`stage.event`) to the set a plan is checked against;
    `value_points`, among them, hold a value (`fault_value`): the only ones `corrupt` may name."""
    listed, holding = tuple(names), frozenset(value_points)
    bad = [n for n in listed if not _POINT_NAME.match(n)]
    if bad:
        raise ValueError(f"fault point {bad[0]!r} is not named stage.event")
    if not holding <= set(listed):
        raise ValueError(f"value points {sorted(holding - set(listed))} are not among the points registered with them")
    with _install_lock:
        for n in listed:
            _registered[n] = _registered.get(n, False) or n in holding


def registered_points() -> tuple[str, ...]:
    """Every point a plan may name, in the order registered."""
    return tuple(_registered)


def registered_value_points() -> tuple[str, ...]:
    """The registered points that hold a value (`fault_value`)."""
    return tuple(n for n, holds in _registered.items() if holds)


def fault_point(name: str) -> None:
    """Run the installed handler for point `name`; a no-op (one global read) when none is."""
    handler = _handler
    if handler is not None:
        handler(name)


def fault_value(name: str, value):
    """`fault_point(name)` at a point that holds `value` (a tensor or a tuple of them): returns
    `value`, or a corrupted copy when a `corrupt` rule fired here in this thread."""
    handler = _handler
    if handler is None:
        return value
    _corrupting.rule = None
    handler(name)
    fired, _corrupting.rule = _corrupting.rule, None
    if fired is None or fired[0] != name:
        return value
    return corrupt(value, fired[1])


def corrupt(value, factor: float):
    """`value` with every floating tensor multiplied by `factor` (a NamedTuple keeps its type).
    Multiplying, not overwriting, keeps the autograd graph: the backward still runs, on the
    wrong numbers, as it would after a race."""
    # Duck-typed: this module is imported by the harness, whose parent process never loads torch.
    if callable(getattr(value, "is_floating_point", None)):
        return value * factor if value.is_floating_point() else value
    if isinstance(value, tuple):
        items = [corrupt(v, factor) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def set_handler(fn: Handler | None) -> None:
    """Install (or remove, with None) the external handler, e.g. the harness scheduler."""
    global _external
    with _install_lock:
        _external = fn
        _recompose()


def install_plan(spec: str, seed: int = 0) -> FaultPlan | None:
    """Parse `spec` and install it as the plan (replacing any previous one); '' removes it."""
    global _plan
    plan = FaultPlan(parse_plan(spec), seed=seed) if spec.strip() else None
    with _install_lock:
        _plan = plan
        _recompose()
    return plan


def install_from_env(environ: Mapping[str, str] | None = None) -> FaultPlan | None:
    """Install the plan in `HARNESS_FAULTS` (seeded by `HARNESS_FAULTS_SEED`); None if unset."""
    env = os.environ if environ is None else environ
    seed_text = env.get(ENV_SEED, "0")
    try:
        seed = int(seed_text)
    except ValueError:
        raise ConfigError(f"invalid {ENV_SEED} {seed_text!r}: expected an integer") from None
    return install_plan(env.get(ENV_PLAN, ""), seed=seed)


def clear() -> None:
    """Remove both the external handler and the plan."""
    global _external, _plan
    with _install_lock:
        _external = None
        _plan = None
        _recompose()


def current_plan() -> FaultPlan | None:
    return _plan


def _recompose() -> None:
    global _handler
    sources = [h for h in (_external, _plan) if h is not None]
    if not sources:
        _handler = None
    elif len(sources) == 1:
        _handler = sources[0]
    else:
        _handler = _chain(*sources)


def _chain(*handlers: Handler) -> Handler:
    def chained(name: str) -> None:
        for h in handlers:
            h(name)

    return chained


def measure_off_cost(n: int = 1_000_000) -> float:
    """Nanoseconds per `fault_point` call with nothing installed (a program's bench reports it)."""
    if _handler is not None:
        raise RuntimeError("measure_off_cost needs no fault handler installed")
    point = fault_point
    t0 = time.perf_counter_ns()
    for _ in range(n):
        point("bench.off_cost")
    return (time.perf_counter_ns() - t0) / max(n, 1)


# ---------------------------------------------------------------------------------------------
# Plan: parsed rules plus their mutable counters


@dataclass(slots=True)
class Rule:
    point: str
    thread_glob: str | None
    probability: float  # 0..1
    count: int | None  # None = unlimited
    task: str
    arg: str | None
    text: str  # the rule as written, for error messages and describe()


@dataclass(slots=True)
class FaultPlan:
    """Installed rules; callable as a handler. `hits[point]` counts tasks actually performed."""

    rules: tuple[Rule, ...]
    seed: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    _remaining: list[int | None] = field(init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._remaining = [r.count for r in self.rules]
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def __call__(self, name: str) -> None:
        rule = self._select(name, threading.current_thread().name)
        if rule is not None:
            _perform(rule, name)

    def _select(self, name: str, thread: str) -> Rule | None:
        with self._lock:
            for i, rule in enumerate(self.rules):
                if rule.point != name or not _thread_matches(rule, thread):
                    continue
                if self._remaining[i] == 0:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    return None
                if self._remaining[i] is not None:
                    self._remaining[i] -= 1
                self.hits[name] = self.hits.get(name, 0) + 1
                return rule
        return None

    def describe(self) -> str:
        return "; ".join(r.text for r in self.rules) + f" (seed {self.seed})"


def _thread_matches(rule: Rule, thread: str) -> bool:
    return rule.thread_glob is None or fnmatch.fnmatchcase(thread, rule.thread_glob)


def _perform(rule: Rule, name: str) -> None:
    if rule.task == "raise":
        where = f"fault point {name} in thread {threading.current_thread().name}"
        raise InjectedFault(f"injected fault at {where}" + (f": {rule.arg}" if rule.arg else ""))
    if rule.task == "delay":
        time.sleep(float(rule.arg) / 1000.0)
    elif rule.task == "spin":
        end = time.monotonic() + float(rule.arg) / 1000.0
        while time.monotonic() < end:
            pass
    elif rule.task == "yield":
        time.sleep(0)  # releases the GIL: lets another thread run right at this point
    elif rule.task == "corrupt":
        # fault_value, which called this handler in this thread, applies it to its value.
        _corrupting.rule = (name, float(rule.arg) if rule.arg is not None else 0.0)


# ---------------------------------------------------------------------------------------------
# Parser (fail-rs grammar)

_RULE_RE = re.compile(r"^(?P<point>[^@=\s]+)(?:@(?P<glob>[^=\s]+))?=(?P<action>.*)$")
_ACTION_RE = re.compile(r"^(?:(?P<p>[^%*()]+)%)?(?:(?P<cnt>[^%*()]+)\*)?(?P<task>[A-Za-z_]+)(?:\((?P<arg>[^()]*)\))?$")


def parse_plan(spec: str) -> tuple[Rule, ...]:
    """Parse `rule;rule;...`; raises ConfigError naming the bad rule and what is wrong."""
    rules = [parse_rule(part.strip()) for part in spec.split(";") if part.strip()]
    return tuple(rules)


def parse_rule(text: str) -> Rule:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"invalid fault spec {text!r}: {why}")

    m = _RULE_RE.match(text)
    if m is None:
        raise bad("expected name[@thread-glob]=[p%][cnt*]task[(arg)]")
    point = m["point"]
    known = registered_points()
    if point not in known:
        listed = ", ".join(known) or "none; a program names its own with register_points"
        raise bad(f"unknown point {point!r} (known: {listed})")
    a = _ACTION_RE.match(m["action"].strip())
    if a is None:
        raise bad(f"cannot parse action {m['action']!r}; expected [p%][cnt*]task[(arg)]")
    task = a["task"]
    if task not in TASKS:
        raise bad(f"unknown task {task!r} (known: {', '.join(TASKS)})")
    holding = registered_value_points()
    if task == "corrupt" and point not in holding:
        raise bad(f"task 'corrupt' needs a point that holds a value ({', '.join(holding)})")
    return Rule(
        point=point,
        thread_glob=m["glob"],
        probability=_parse_probability(a["p"], bad),
        count=_parse_count(a["cnt"], bad),
        task=task,
        arg=_parse_arg(task, a["arg"], bad),
        text=text,
    )


def _parse_probability(p: str | None, bad: Callable[[str], ConfigError]) -> float:
    if p is None:
        return 1.0
    try:
        value = float(p)
    except ValueError:
        raise bad(f"failed to parse frequency {p + '%'!r}") from None
    if not 0.0 <= value <= 100.0:
        raise bad(f"frequency {p + '%'!r} must be between 0% and 100%")
    return value / 100.0


def _parse_count(cnt: str | None, bad: Callable[[str], ConfigError]) -> int | None:
    if cnt is None:
        return None
    if not cnt.isdigit():
        raise bad(f"failed to parse count {cnt + '*'!r}: expected a non-negative integer")
    return int(cnt)


def _parse_arg(task: str, arg: str | None, bad: Callable[[str], ConfigError]) -> str | None:
    if task in ("delay", "spin"):
        if arg is None:
            raise bad(f"task {task!r} needs a duration in ms, e.g. {task}(5)")
        try:
            ms = float(arg)
        except ValueError:
            raise bad(f"{task}({arg}): duration must be a number of ms") from None
        if not ms >= 0:
            raise bad(f"{task}({arg}): duration must be >= 0")
        return arg
    if task in ("off", "yield") and arg is not None:
        raise bad(f"task {task!r} takes no argument")
    if task == "corrupt" and arg is not None:
        try:
            factor = float(arg)
        except ValueError:
            raise bad(f"corrupt({arg}): the factor must be a number") from None
        if not math.isfinite(factor):
            raise bad(f"corrupt({arg}): the factor must be finite (train.nan_check already catches a non-finite loss)")
    return arg
