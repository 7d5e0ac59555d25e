"""`python -m harness report`: rebuild REPORT.md's generated tables and plots from stores."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis import report
from harness.stores.discovery import stores_given

HELP = "rebuild REPORT.md's generated tables and plots from stores"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")
    p.add_argument("--out", default="REPORT.md")


def run(opts: argparse.Namespace) -> int:
    # The failure-modes overview sums every store: rebuilt only when no --store narrows the set.
    names = report.rebuild(stores_given(opts.store), Path(opts.out), overview=not opts.store)
    print(f"wrote {opts.out}: {len(names)} block(s): {', '.join(names) or '-'}")
    return 0
