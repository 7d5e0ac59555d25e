"""Exception types shared by the trainer's stages.

Policy (as in torchtitan): `UserInputError` subclasses for anything the user can fix (bad config,
bad data, bad device plan) -- the CLI prints one line and exits 2; `assert` only for internal
invariants; typed exceptions for control flow.
"""


class UserInputError(ValueError):
    """Bad input; the CLI reports `error: <message>` and exits 2, writing nothing."""


class ConfigError(UserInputError):
    """Invalid configuration value or unknown preset/fix/key."""


class DataError(UserInputError):
    """Unreadable, truncated, corrupt or empty dataset, or a sample that fits no bucket."""


class DevicePlanError(UserInputError):
    """A device plan naming devices that do not exist or cannot run the requested mode."""


class StageStopped(Exception):
    """Raised inside a stage when the pipeline is stopping; not a failure."""


class InjectedFault(RuntimeError):
    """Raised by a fault point whose plan says `raise` (tests error propagation)."""


class WrongResult(RuntimeError):
    """The run produced a wrong answer (NaN loss, divergence); the CLI exits 3."""
