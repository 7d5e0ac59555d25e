"""Exception types shared by the trainer's stages.

Policy (as in torchtitan): `UserInputError` subclasses for anything the user can fix (bad config,
bad data, bad device plan) -- the CLI prints one line and exits 2; `assert` only for internal
invariants; typed exceptions for control flow. The three errors the fix registry and the fault
points raise live with them in harness.runtime.errors and are named here too.
"""

from harness.runtime.errors import ConfigError, InjectedFault, UserInputError

__all__ = [
    "ConfigError",
    "DataError",
    "DevicePlanError",
    "InjectedFault",
    "StageStopped",
    "UserInputError",
    "WrongResult",
]


class DataError(UserInputError):
    """Unreadable, truncated, corrupt or empty dataset, or a sample that fits no bucket."""


class DevicePlanError(UserInputError):
    """A device plan naming devices that do not exist or cannot run the requested mode."""


class StageStopped(Exception):
    """Raised inside a stage when the pipeline is stopping; not a failure."""


class WrongResult(RuntimeError):
    """The run produced a wrong answer (NaN loss, divergence); the CLI exits 3."""
