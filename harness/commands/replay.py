"""`python -m harness replay`: rerun a stored trial N times and count its signature."""

from __future__ import annotations

import argparse
import json

from harness.args import positive_int
from harness.campaign import replay
from harness.stores.discovery import find_trial, trial_stores_given

HELP = "rerun a stored trial N times and count its signature"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial_id")
    p.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")
    p.add_argument("-n", "--times", type=positive_int, default=10)
    p.add_argument("--json", action="store_true")


def run(opts: argparse.Namespace) -> int:
    stores = trial_stores_given(opts.store)
    record, store_dir = find_trial(opts.trial_id, stores)
    results = replay.replay(record, store_dir, opts.times)
    s = replay.summary(record, results)
    if opts.json:
        print(json.dumps(s, indent=2, sort_keys=True))
    else:
        what = record.signature_summary or record.outcome.name
        print(
            f"{s['reproduced']}/{s['replays']} replays of {record.trial_id} reproduced "
            f"{record.outcome.name} {what!r} (plan seed {record.plan_seed}); "
            f"Wilson 95% [{100 * s['wilson_low']:.1f}%, {100 * s['wilson_high']:.1f}%]"
        )
        for other, count in s["others"].items():
            print(f"  {count} x {other}")
    return 0 if s["reproduced"] else 1
