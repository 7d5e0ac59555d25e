"""`python -m harness re-sign`: regroup stored failures of an older signature version from their artefacts."""

from __future__ import annotations

import argparse

from harness.stores.discovery import stores_given
from harness.stores.resign import resign_store
from harness.stores.retire import with_retired

ALIASES = ("resign",)
"""Its name before: a store's scripts and notes still say `harness resign`."""
HELP = "regroup stored failures of an older signature version from their artefacts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")


def run(opts: argparse.Namespace) -> int:
    stores = stores_given(opts.store, existing=True)
    # Retired records too (harness retire): the report still counts their failures by family.
    for store in with_retired(stores):
        print(resign_store(store).line())
    return 0
