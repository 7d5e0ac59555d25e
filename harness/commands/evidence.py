"""`python -m harness evidence`: regenerate the counts the package ships (harness/diagnosis/evidence.json)
from the result stores, so that diagnose and doctor cite the same k/n where `results/` is absent."""

from __future__ import annotations

import argparse

from harness.diagnosis import evidence

HELP = "regenerate the shipped evidence file (k/n per race, fix, torch) from the stores"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="only say whether the shipped file is stale (exit 1 if so)")


def run(opts: argparse.Namespace) -> int:
    if opts.check:
        stale = evidence.stale()
        print(f"{evidence.EVIDENCE_PATH}: {'stale: run python -m harness evidence' if stale else 'up to date'}")
        return 1 if stale else 0
    data = evidence.build()
    evidence.write(data)
    print(f"{evidence.EVIDENCE_PATH}: {len(data['counts'])} counts from {len(data['stores'])} stores")
    return 0
