"""Command-line argument helpers shared by every command (one `error:` line for a bad argument).

Low in the layering: command modules (packing's replay, crosstab) import these, and the CLI
imports the command modules, never the other way round.
"""

from __future__ import annotations

import argparse

from harness.runtime.errors import UserInputError


class UsageError(UserInputError):
    """Bad command line; printed as one `error:` line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage dump is noise for a one-line contract
        raise UsageError(message)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def comma_list(values: list[str]) -> list[str]:
    """An option given as "repeat or separate with commas" (--cells, crosstab's --family and
    --without): every non-empty item, stripped, in order."""
    return [item.strip() for arg in values for item in arg.split(",") if item.strip()]
