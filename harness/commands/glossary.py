"""`python -m harness glossary`: rewrite docs/glossary.md's tables of race ids, repros and fix names
from the catalogue, the repro scripts and the fix registry; the hand-written terms are kept."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.analysis.report import replace_block
from harness.diagnosis import glossary
from harness.stores.store import write_atomic

HELP = "rewrite docs/glossary.md's tables of race ids, repros and fix names"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default=os.path.relpath(glossary.GLOSSARY), help="the glossary file (default: docs/glossary.md)"
    )
    p.add_argument("--check", action="store_true", help="only say whether the file is stale (exit 1 if so)")


def run(opts: argparse.Namespace) -> int:
    path = Path(opts.out)
    old = path.read_text(encoding="utf-8") if path.exists() else "# Glossary\n"
    new = old
    for name, body in glossary.blocks().items():
        new = replace_block(new, name, body)
    if opts.check:
        print(f"{path}: {'stale: run python -m harness glossary' if new != old else 'up to date'}")
        return 1 if new != old else 0
    if new != old:
        write_atomic(path, new.encode("utf-8"))
    print(f"{path}: {'rewritten' if new != old else 'up to date'}")
    return 0
