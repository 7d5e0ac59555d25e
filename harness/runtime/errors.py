"""The errors the runtime raises into the program under test.

`UserInputError` is the project's one "the user can fix this" base: a program's and the harness's
command lines print it as one line and exit 2 (a program subclasses it for its own inputs, as the
trainer does for data and device plans).
"""


class UserInputError(ValueError):
    """Bad input; the CLI reports `error: <message>` and exits 2, writing nothing."""


class ConfigError(UserInputError):
    """Invalid configuration value or unknown preset/fix/key."""


class InjectedFault(RuntimeError):
    """Raised by a fault point whose plan says `raise` (tests error propagation)."""
