"""The trainer's own exception types: bad data, a bad device plan, a stopping stage, a wrong result.

Policy (as in torchtitan): `UserInputError` subclasses (harness.runtime.errors) for anything the
user can fix -- the CLI prints one line and exits 2; `assert` only for internal invariants; typed
exceptions for control flow. `ConfigError` and `InjectedFault`, which the fix registry and the
fault points raise too, live in harness.runtime.errors.
"""

from harness.runtime.errors import UserInputError


class DataError(UserInputError):
    """Unreadable, truncated, corrupt or empty dataset, or a sample that fits no bucket."""


class DevicePlanError(UserInputError):
    """A device plan naming devices that do not exist or cannot run the requested mode."""


class StageStopped(Exception):
    """Raised inside a stage when the pipeline is stopping; not a failure."""


class WrongResult(RuntimeError):
    """The run produced a wrong answer (NaN loss, divergence); the CLI exits 3."""
