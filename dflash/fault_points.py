"""The trainer's named fault points (`stage.event`), registered with the harness runtime.

Imported by `dflash/__init__.py`, so that they are known before any plan (`HARNESS_FAULTS`, a
scheduler plan) is parsed; the harness's `dflash-stages` profile and scheduler name them too.
"""

from __future__ import annotations

from harness.runtime.failpoints import register_points

POINTS = (
    "prefetch.before_put",
    "prefetch.after_put",
    "target.after_get",
    "target.before_forward",
    "target.after_forward",
    "target.before_put",
    "drafter.after_get",
    "drafter.before_compile",
    "drafter.after_compile",
    "drafter.before_forward",
    "drafter.after_forward",
    "drafter.before_backward",
    "drafter.after_backward",
    "drafter.before_step",
    "drafter.after_step",
    "gate.before_open",
)
VALUE_POINTS = ("drafter.after_forward",)
"""Points that hold a value (`fault_value`): the only ones a `corrupt` rule may name."""

register_points(POINTS, value_points=VALUE_POINTS)
