"""`python -m harness show`: one stored trial, readable: failure, family, tracebacks, native and hang dumps."""

from __future__ import annotations

import argparse

from harness.analysis import show
from harness.stores.discovery import find_trial, trial_stores_given
from harness.stores.retire import with_retired

HELP = "one stored trial, readable: failure, family, tracebacks, native and hang dumps"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial_id")
    p.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")


def run(opts: argparse.Namespace) -> int:
    stores = trial_stores_given(opts.store)
    record, store_dir = find_trial(opts.trial_id, with_retired(stores))
    print(show.render(record, store_dir))
    return 0
