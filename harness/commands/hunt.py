"""`python -m harness hunt [options] -- PYTEST_ARGS`: run your own pytest suite with each test
body in several threads at once (pytest-run-parallel), several times, and name the races."""

from __future__ import annotations

import argparse
import os

from harness.campaign import backends, bytecode_cache
from harness.campaign.hunt.engine import run_hunt
from harness.faults.profiles import PROFILES

HELP = "run your pytest suite's tests in several threads at once, several times, and name the races"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=3, help="runs of the suite (per fix set; default 3)")
    p.add_argument("--threads", type=int, default=4, help="threads each test body runs in (default 4)")
    p.add_argument(
        "--workers",
        type=int,
        help=f"runs at once (default: the cores, {os.cpu_count() or 1} here; with --backend ray the cluster's CPUs)",
    )
    p.add_argument("--plan", help=f"scheduler profile, run i gets seed i ({', '.join(PROFILES)})")
    p.add_argument(
        "--fix",
        action="append",
        metavar="NAMES",
        help="apply these registry fixes (comma-separated; `none`) inside the test processes, no edit; "
        "give it several times to compare the sets per test on the same seeds",
    )
    p.add_argument(
        "--test-timeout",
        type=float,
        default=120.0,
        help="cut a test running longer than this, seconds (pytest-timeout; default 120)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="deadline of one run of the suite (default 1800 s)")
    p.add_argument("--bytecode-cache", metavar="DIR", help=bytecode_cache.HELP)
    p.add_argument("-o", "--output", help="folder for the runs and hunt.jsonl; the same folder resumes a hunt")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    backends.add_arguments(p, "runs")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- PYTEST_ARGS...")


def run(opts: argparse.Namespace) -> int:
    return run_hunt(opts)
