"""`python -m harness crosstab`: does a fix go with a failure family: trials with it vs without."""

from __future__ import annotations

import argparse
import dataclasses
import json

from harness.analysis import crosstab
from harness.analysis.crosstab import CrosstabError
from harness.analysis.verdicts import holds
from harness.args import comma_list
from harness.diagnosis import families
from harness.stores.discovery import stores_given
from harness.stores.store import Store

HELP = "does a fix go with a failure family: trials with it vs without"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("fix", help="a fix name as it appears in strategy names (e.g. cstash-tls-init)")
    p.add_argument(
        "--family",
        action="append",
        default=[],
        help="count only failures of these families (harness.diagnosis.families; repeat or comma-separate)",
    )
    p.add_argument("--cells", action="append", default=[], metavar="GLOB", help="only trials of matching cells")
    p.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="FIX",
        help="leave out trials whose strategy holds FIX (repeat or comma-separate): e.g. a "
        "count as it stood before a fix's cells ran",
    )
    p.add_argument("--store", action="append", help="store folder(s) (default: results/*)")
    p.add_argument("--json", action="store_true")


def run(opts: argparse.Namespace) -> int:
    names = comma_list(opts.family)
    unknown = [n for n in names if n not in families.DESCRIPTIONS]
    if unknown:
        raise CrosstabError(f"unknown family {unknown[0]!r}; known: {', '.join(families.DESCRIPTIONS)}")
    wanted = frozenset(names) or None
    dirs = stores_given(opts.store, existing=True)
    loaded = [(d.name, Store(d).load()) for d in dirs]
    seen = {r.strategy or "" for _, rs in loaded for r in rs}
    if not any(holds(s, opts.fix) for s in seen):
        raise CrosstabError(f"no stored trial's strategy holds {opts.fix!r}")
    cells = comma_list(opts.cells)
    without = comma_list(opts.without)
    if opts.fix in without:
        raise CrosstabError(f"--without {opts.fix} leaves no trial with the fix")
    found = crosstab.rows(loaded, opts.fix, wanted, cells, without)
    if opts.json:
        print(
            json.dumps(
                {
                    "fix": opts.fix,
                    "families": sorted(wanted) if wanted else None,
                    "rows": [dataclasses.asdict(r) for r in found],
                },
                indent=2,
            )
        )
    else:
        print(crosstab.table(opts.fix, wanted, found))
    return 0
