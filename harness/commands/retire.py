"""`python -m harness retire`: take a store's records of some cells out of the count (kept in <store>/retired)."""

from __future__ import annotations

import argparse

from harness.args import UsageError
from harness.stores import retire

HELP = "take a store's records of some cells out of the count (kept in <store>/retired)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="the store folder")
    p.add_argument("--cells", required=True, help="cell glob(s), comma-separated (as matrix --cells)")
    p.add_argument("--reason", required=True, help="why they stop counting (kept in retired/reasons.jsonl)")


def run(opts: argparse.Namespace) -> int:
    try:
        done = retire.retire(opts.store, [g.strip() for g in opts.cells.split(",")], opts.reason)
    except retire.RetireError as e:
        raise UsageError(str(e)) from None
    print(done.line())
    return 0
