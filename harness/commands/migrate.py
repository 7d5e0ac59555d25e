"""`python -m harness migrate`: write the fields records gained since they were stored (the cell's workload, strategy, fixes and plan) into their stores."""

from __future__ import annotations

import argparse

from harness.stores.discovery import stores_given
from harness.stores.migrate import migrate_store
from harness.stores.retire import with_retired

HELP = "write the fields records gained since they were stored (workload, strategy, fixes, plan) into their stores"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")


def run(opts: argparse.Namespace) -> int:
    for store in with_retired(stores_given(opts.store, existing=True)):
        print(migrate_store(store).line())
    return 0
