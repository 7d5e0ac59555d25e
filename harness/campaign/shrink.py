"""`python -m harness shrink TRIAL_ID [-n N]`: which parts of a failing trial's fault plan the
failure needs.

A matrix cell's plan is a profile's whole bundle (a switch interval, several rules at several
points); when it reproduces a race, the question a user asks next is which of them matter, i.e.
where the window is. Shrinking answers it by ablation, as Hypothesis shrinks an example and
ploom minimises a schedule (a DFS with a preemption bound, minimised JSON traces), but with a
probabilistic oracle: each candidate plan is rerun N times and the failure counts only with the
original's outcome and signature (replay.same_failure).

- First the full plan (baseline k0/N; 0/N -> nothing to shrink, exit 1) and no plan at all (if
  that still reproduces at least half as often, the plan is not needed and shrinking stops).
- Then one component at a time, in plan order (each rule, then the switch interval, then the
  start barrier): the plan without it is kept when it still reproduces at least half as often as
  the baseline (k >= max(1, ceil(k0 / 2))). Decisions are drawn per (seed, point, thread, hit)
  (harness.faults.scheduler), so removing one rule leaves the other rules' decisions as they were.

Every run is stored in `<store>/shrinks` (ids `<trial id>~shrink<j>`, `replay_of` set) and the
minimal plan's spec is written next to it, runnable with `python -m harness run`. With N = 5 a
step tells "still reproduces" from "no longer does" only for large rate changes; raise -n for
rarer races.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from harness import stats
from harness.campaign.local import with_run_dir
from harness.campaign.loop import kill_child_groups
from harness.campaign.replay import ReplayError, load_trial_spec, same_failure
from harness.stores.store import Store
from harness.trial.outcome import TrialResult
from harness.trial.runner import run_trial

SHRINKS_NAME = "shrinks"


@dataclass(kw_only=True, slots=True, frozen=True)
class Step:
    label: str
    """What this candidate plan is (`full plan`, `no plan`, `without rule 2 ...`)."""
    plan: dict | None
    reproduced: int
    runs: int
    kept: bool | None
    """For a component: True = the plan without it was kept (component removed); None for the
    baseline and the no-plan check."""
    removed: frozenset[str] = frozenset()
    """Keys (`components`) of what `plan` lacks against the trial's own plan."""

    def line(self) -> str:
        ci = stats.wilson(self.reproduced, self.runs)
        verdict = {True: "-> not needed, removed", False: "-> needed", None: ""}[self.kept]
        return (
            f"{self.label:<58} {self.reproduced}/{self.runs}  [{100 * ci.low:.1f}%, {100 * ci.high:.1f}%] {verdict}"
        ).rstrip()


def components(plan: dict) -> list[tuple[str, str]]:
    """(key, label) of every rule, the switch interval and the start barrier, in that order;
    `without(plan, keys)` removes them by key (rule keys are their index in the original plan)."""
    out = []
    for i, rule in enumerate(plan.get("rules", [])):
        desc = f"{rule['point']} {rule.get('when', 'before')} {rule['action']} p={rule.get('probability', 1.0):g}"
        out.append((f"rule{i}", f"rule {i + 1} ({desc})"))
    if plan.get("switch_interval") is not None:
        out.append(("switch", f"switch_interval={plan['switch_interval']:g}"))
    if plan.get("start_barrier") is not None:
        out.append(("barrier", "start_barrier"))
    return out


def without(plan: dict, keys: set[str]) -> dict:
    """`plan` less the components whose keys are given."""
    return {
        **plan,
        "rules": [r for i, r in enumerate(plan.get("rules", [])) if f"rule{i}" not in keys],
        "switch_interval": None if "switch" in keys else plan.get("switch_interval"),
        "start_barrier": None if "barrier" in keys else plan.get("start_barrier"),
    }


def enough(k: int, baseline: int) -> bool:
    """A candidate still reproduces: at least half as often as the full plan, and at least once."""
    return k >= max(1, math.ceil(baseline / 2))


class Shrinker:
    def __init__(self, record: TrialResult, store_dir: Path, runs: int, workers: int, stream) -> None:
        self.record, self.runs, self.workers, self.stream = record, runs, workers, stream
        self.spec = load_trial_spec(record, store_dir)
        if self.spec.plan is None:
            raise ReplayError(f"trial {record.trial_id} ran without a fault plan: nothing to shrink")
        if not record.outcome.is_failure:
            raise ReplayError(f"trial {record.trial_id} did not fail ({record.outcome.name}): nothing to shrink")
        self.store = Store(store_dir / SHRINKS_NAME)
        self.next_j = sum(1 for r in self.store.load() if r.replay_of == record.trial_id)

    def measure(self, plan: dict | None) -> int:
        """Runs of the trial with `plan`, `workers` at a time; how many failed the same way."""
        specs = []
        for _ in range(self.runs):
            rid = f"{self.record.trial_id}~shrink{self.next_j}"
            self.next_j += 1
            artefacts = self.store.artefacts_dir(rid)
            specs.append((with_run_dir(dataclasses.replace(self.spec, trial_id=rid, plan=plan), artefacts), artefacts))
        with concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="shrink-run") as pool:
            try:
                results = list(pool.map(lambda sa: run_trial(sa[0], sa[1], replay_of=self.record.trial_id), specs))
            except KeyboardInterrupt:
                # Runs lead their own sessions (Ctrl-C does not reach them): kill them, as the
                # matrix pool does, so the executor's exit does not wait for them to finish.
                pool.shutdown(wait=False, cancel_futures=True)
                kill_child_groups()
                raise
        for r in results:
            self.store.append(r)
        return sum(same_failure(self.record, r) for r in results)

    def step(self, label: str, plan: dict | None, kept_if: int | None, removed: frozenset[str] = frozenset()) -> Step:
        k = self.measure(plan)
        s = Step(
            label=label,
            plan=plan,
            reproduced=k,
            runs=self.runs,
            kept=None if kept_if is None else enough(k, kept_if),
            removed=removed,
        )
        print(f"  {s.line()}", file=self.stream, flush=True)
        return s

    def run(self) -> list[Step]:
        plan = self.spec.plan
        print(
            f"shrink {self.record.trial_id}: {self.record.signature_summary or self.record.outcome.name} "
            f"(plan {plan.get('profile')} seed {plan.get('seed')}: {len(components(plan))} components), "
            f"{self.runs} runs per step",
            file=self.stream,
            flush=True,
        )
        steps = [self.step("full plan", plan, None)]
        k0 = steps[0].reproduced
        if k0 == 0:
            return steps
        plain = self.step("no plan at all", None, None)
        steps.append(plain)
        if enough(plain.reproduced, k0):
            return steps
        removed: set[str] = set()
        for key, label in components(plan):
            s = self.step(f"without {label}", without(plan, removed | {key}), k0, frozenset(removed | {key}))
            steps.append(s)
            if s.kept:
                removed.add(key)
        return steps


def minimal_plan(steps: list[Step]) -> tuple[dict | None, Step]:
    """The smallest plan that still reproduced, and the step that measured it."""
    if len(steps) >= 2 and steps[1].plan is None and enough(steps[1].reproduced, steps[0].reproduced):
        return None, steps[1]
    last = steps[0]
    for s in steps[2:]:
        if s.kept:
            last = s
    return last.plan, last


def describe(original: dict, minimal: Step) -> str:
    """The minimal plan, named by the original plan's component labels."""
    if minimal.plan is None:
        return "no plan (the failure does not need the scheduler)"
    kept = [label for key, label in components(original) if key not in minimal.removed]
    return ", ".join(kept) or "an empty plan (seed only)"
