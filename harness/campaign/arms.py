"""The fix arms stress and hunt share: run i of a foreign command under one fix set and plan.

An arm's fixes are None (the program as it is: no bootstrap fix at all), () (`--fix none`: the
guard with no fix) or fix names; its plan is a scheduler profile seeded by the run's seed, so run
i of every arm meets the same seed.
"""

from __future__ import annotations

import os

from harness.args import UsageError
from harness.campaign.plans import PlanChoice, plan_json
from harness.runtime.guard import Guard, GuardError
from harness.trial.cells import NO_PLAN, cell_name, strategy_name
from harness.trial.spec import TrialSpec, WorkloadSpec

INTERRUPTED_RC = 130
"""Exit status after Ctrl-C, as a shell reports a command SIGINT ended (128 + 2)."""


def fix_sets(values: list[str] | None) -> tuple[tuple[str, ...] | None, ...]:
    """Each `--fix` value as the fix names of one arm (`none`: the guard with no fix); no `--fix`
    is one arm that runs the program as it is (None). A name that is not a fix, or a policy, is
    bad input."""
    return tuple(_fix_set(v) for v in values or ()) or (None,)


def _fix_set(names: str) -> tuple[str, ...]:
    try:
        guard = Guard(names)
    except GuardError as e:
        raise UsageError(f"--fix: {e}") from None
    if guard.policies:
        raise UsageError(f"--fix: {', '.join(guard.policies)} act only in a program that reads them (policies)")
    return guard.names


def arm_strategy(fixes: tuple[str, ...] | None) -> str:
    """The arm as a cell's strategy: `as-is` (no bootstrap fixes at all), `raw` (`--fix none`: the
    guard with no fix) or the fixes joined by `+`."""
    return "as-is" if fixes is None else strategy_name(fixes)


def arm_spec(
    command: str,
    index: int,
    seed: int,
    argv: list[str],
    fixes: tuple[str, ...] | None,
    plan_name: str | None,
    *,
    timeout_s: float,
    hang_s: float | None,
    env: dict[str, str] | None = None,
    **extra,
) -> TrialSpec:
    """Run `index` of a foreign command under one arm: `fixes` and the named plan seeded by `seed`,
    from the working directory. stress and hunt build theirs here."""
    plan = plan_json(PlanChoice(name=plan_name, profile=plan_name), seed) if plan_name else None
    return TrialSpec(
        trial_id=f"{command}/{index}",
        cell=cell_name(command, arm_strategy(fixes), plan_name or NO_PLAN),
        workload=WorkloadSpec(kind="command", argv=argv),
        fixes=fixes,
        foreign=True,
        plan=plan,
        timeout_s=timeout_s,
        hang_s=hang_s,
        trial_index=seed,
        cwd=os.getcwd(),
        env=dict(env or {}),
        **extra,
    )
