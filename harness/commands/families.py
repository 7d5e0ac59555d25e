"""`python -m harness families`: failing trials per failure family and torch version over some stores."""

from __future__ import annotations

import argparse

from harness.analysis.family_table import family_table
from harness.stores.discovery import stores_given
from harness.stores.retire import with_retired
from harness.stores.store import Store

HELP = "failing trials per failure family and torch version over some stores"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")


def run(opts: argparse.Namespace) -> int:
    """The failure-modes table (results/FAILURE-MODES.md) for the stores named (e.g. the trainer's
    stores without the repros'): retired records count, as there (their failures were observed)."""

    stores = stores_given(opts.store, existing=True)
    rows, totals = family_table([(s, Store(s).load()) for s in with_retired(stores)])
    print("\n".join(rows))
    print(f"trials that count: {totals or 'none'}")
    return 0
