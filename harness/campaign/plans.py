"""A fault plan as the engines choose it (a profile, an explicit plan, or none) and the plan one
run carries: what matrix, stress and hunt share about plans, below all three."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.faults.profiles import plan_from_seed
from harness.faults.scheduler import InvalidPlan, Plan


@dataclass(kw_only=True, slots=True, frozen=True)
class PlanChoice:
    name: str
    """Label in cell names; the profile name for seeded plans, `-` for no plan."""
    profile: str | None = None
    """Scheduler profile: the trial's plan is `harness.faults.profiles.plan_from_seed(seed, profile)`."""
    explicit: dict[str, Any] | None = None
    """A fixed plan (the JSON of `Plan.to_json`), the same for every trial."""


def plan_json(choice: PlanChoice, seed: int) -> dict[str, Any] | None:
    """The plan a trial carries: derived from its profile, or the explicit plan with this trial's
    seed (so runtime decisions vary across trials like a profile's do), or None. Raises
    InvalidPlan (bad input) for a plan that cannot be made."""
    if choice.profile is None and choice.explicit is None:
        return None
    try:
        if choice.profile is not None:
            return plan_from_seed(seed, choice.profile).to_dict()
        return Plan.from_dict({**choice.explicit, "seed": seed}).to_dict()
    except (InvalidPlan, ValueError) as e:
        raise InvalidPlan(f"malformed plan {choice.name!r}: {e}") from None
