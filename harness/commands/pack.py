"""`python -m harness pack`: pack a store's finished trial folders into one zip each (read as before)."""

from __future__ import annotations

import argparse

from harness.args import UsageError
from harness.stores import zips
from harness.stores.discovery import stores_given

HELP = "pack a store's finished trial folders into one zip each (read as before)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")


def run(opts: argparse.Namespace) -> int:
    stores = stores_given(opts.store)
    try:
        for store in stores:  # every store checked before any is packed: bad input writes nothing
            zips.check(store)
    except zips.PackError as e:
        raise UsageError(str(e)) from None
    for store in stores:
        for done in zips.pack_store(store):
            print(done.line())
    return 0
