"""`python -m harness benches LOG RUN --into FILE`: keep the `dflash bench` records a GPU-host run
printed in its log (and its `harness price` records) in a JSONL file that `harness report` tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis import bench_records

HELP = "keep a GPU-host run's `dflash bench` records (from its log) for the report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", type=Path, help="the run's log (phases `== phase NAME at Ns`, bench lines)")
    p.add_argument("host_run", type=int, metavar="RUN", help="the run's number (the report groups benches by it)")
    p.add_argument("--into", type=Path, required=True, help="the JSONL file of bench records")
    p.add_argument("--records", type=Path, help="also the run's `harness price` records (price.jsonl)")


def run(opts: argparse.Namespace) -> int:
    # Read first: a bad records file is an error before the log's records are added.
    priced = bench_records.read_records(opts.records) if opts.records is not None else []
    n = bench_records.add(opts.log, opts.host_run, opts.into)
    if priced:
        n += bench_records.add_records(priced, opts.host_run, opts.into)
    print(f"{opts.into}: {n} bench record(s) of run {opts.host_run} added")
    return 0
