"""`python -m harness diagnose`: which known race a failure is, the fixes that held against it, its repro."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.campaign.hunt import engine as hunt
from harness.campaign.hunt.records import RECORDS
from harness.diagnosis import diagnose

HELP = "which known race a failure is, the fixes that held against it, its repro"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="trial id, artefacts folder, stress -o folder, store folder, or a log/dump file",
    )
    p.add_argument("--store", action="append", default=[], help="stores to find trial ids in (default: every store)")
    p.add_argument("--json", action="store_true", help="one JSON object: the findings")
    p.add_argument(
        "--torch", help="the torch version a log file ran on (default: the one it names, else the installed)"
    )


def run(opts: argparse.Namespace) -> int:
    if len(opts.targets) == 1 and (Path(opts.targets[0]) / RECORDS).is_file():
        # A hunt's folder: its tests judged as hunt judged them (the same records, the same verdicts).
        hunt.report_folder(Path(opts.targets[0]), as_json=opts.json)
        return 0
    text, findings = diagnose.report(opts.targets, stores=[Path(s) for s in opts.store], torch=opts.torch)
    if opts.json:
        print(json.dumps({"findings": [f.to_json() for f in findings]}, indent=2, default=str))
    else:
        print(text)
    return 0
