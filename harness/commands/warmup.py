"""`python -m harness warmup`: what a compiled trainer run costs before it beats a baseline run."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis import warmup

HELP = "warm-up, steady pace and break-even steps of trainer runs against a baseline run's log"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", type=Path, help="the baseline's log (python -m dflash train stdout+stderr), e.g. eager")
    p.add_argument("runs", type=Path, nargs="+", metavar="run", help="logs to compare with it, e.g. compiled")


def run(opts: argparse.Namespace) -> int:
    base = warmup.read(opts.base)
    runs = [warmup.read(path) for path in opts.runs]
    print(warmup.table(base, runs))
    print(
        f"\npace: the steady window (second half of the steps) with any step over {warmup.PAUSE_FACTOR:g}x "
        "its median left out; warm-up: total s over what the pace gives; break-even: the run's steps "
        "from which it has spent less wall time than the base would for the same tokens."
    )
    return 0
