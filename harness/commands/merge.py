"""`python -m harness merge`: fold other copies of a store (another run, another machine) into one."""

from __future__ import annotations

import argparse

from harness.args import UsageError
from harness.stores import merge

HELP = "fold other copies of a store (another run, another machine) into one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", help="store folder(s) to read")
    p.add_argument("--into", required=True, help="the store folder that receives their records")


def run(opts: argparse.Namespace) -> int:
    try:
        for src in opts.sources:
            merge.check(src, opts.into)
        done = [merge.merge(src, opts.into) for src in opts.sources]
    except merge.MergeError as e:
        raise UsageError(str(e)) from None
    for d in done:
        print(d.line())
    return 0
