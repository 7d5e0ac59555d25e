"""`python -m harness stress [options] -- CMD ...`: run a command over and over in parallel (Go's
stress for users' own programs), then name what the failing runs were."""

from __future__ import annotations

import argparse
import os

from harness.campaign import backends, bytecode_cache
from harness.campaign.stress.engine import DETERMINISTIC_RUNS, run_stress
from harness.campaign.stress.options import DEFAULT_HANG_S
from harness.faults.profiles import PROFILES

HELP = "run a command over and over in parallel (like Go's stress)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-p",
        "--parallel",
        type=int,
        help=f"runs at once (default: the cores, {os.cpu_count() or 1} here; with --backend ray the cluster's CPUs)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of one run, seconds (default 600, as Go's)")
    p.add_argument(
        "--hang",
        type=float,
        help=f"idle this long (no CPU in the process tree, no output, the same stacks) -> HANG "
        f"(default {DEFAULT_HANG_S:g} s or the timeout, if shorter); a busy run is never a hang",
    )
    p.add_argument("--max-runs", type=int, help="stop after this many runs (per fix set; default: until Ctrl-C)")
    p.add_argument("--max-fails", type=int, help="stop after this many failures")
    p.add_argument("--max-time", type=float, help="start no run after this many seconds")
    p.add_argument("--failure", help="count a failing run only if its output matches this regexp")
    p.add_argument("--ignore", help="do not count failing runs whose output matches this regexp")
    p.add_argument("--plan", help=f"scheduler profile for a Python CMD, run i gets seed i ({', '.join(PROFILES)})")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="run CMD's `python` as this interpreter (another venv's torch); default: the harness's own",
    )
    p.add_argument(
        "--fix",
        action="append",
        metavar="NAMES",
        dest="fix",
        help="apply these registry fixes (comma-separated; `none`) to the unmodified Python program; "
        "give it several times to compare the sets side by side on the same seeds",
    )
    p.add_argument(
        "--children",
        action="store_true",
        help="the plan and the fixes reach the Python processes the program starts too (multiprocessing "
        "workers, `python` subprocesses); torch's own compile workers stay untouched",
    )
    p.add_argument(
        "--keep-going",
        action="store_true",
        help=f"run on when each of the first {DETERMINISTIC_RUNS} runs fails the same way (a deterministic failure)",
    )
    p.add_argument("--bytecode-cache", metavar="DIR", help=bytecode_cache.HELP)
    p.add_argument("-o", "--output", help="folder for failing runs' artefacts (default: a new temp folder)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between status lines")
    backends.add_arguments(p, "runs")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def run(opts: argparse.Namespace) -> int:
    return run_stress(opts)
