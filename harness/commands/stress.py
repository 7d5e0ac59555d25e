"""`python -m harness stress [options] -- CMD ...`: run a command over and over in parallel (Go's
stress for users' own programs), then name what the failing runs were."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.campaign.stress import run_stress
from harness.diagnosis import diagnose

HELP = "run a command over and over in parallel (like Go's stress)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--parallel", type=int, default=os.cpu_count() or 1, help="runs at once")
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of one run, seconds (Go: 10 min)")
    p.add_argument("--hang", type=float, help="no output for this long -> HANG (default: the timeout)")
    p.add_argument("--max-runs", type=int, help="stop after this many runs")
    p.add_argument("--max-fails", type=int, help="stop after this many failures")
    p.add_argument("--max-time", type=float, help="start no run after this many seconds")
    p.add_argument("--failure", help="count a failing run only if its output matches this regexp")
    p.add_argument("--ignore", help="do not count failing runs whose output matches this regexp")
    p.add_argument("--plan", help="scheduler profile for a Python CMD (run i gets seed i)")
    p.add_argument("--python", metavar="PATH",
                   help="run CMD's Python (`python ...`) as this interpreter instead (another venv's torch)")
    p.add_argument("-o", "--output", help="folder for failing runs' artefacts (default: a new temp folder)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between status lines")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def run(opts: argparse.Namespace) -> int:
    return run_stress(opts, explain=_diagnose_folder)


def _diagnose_folder(out_dir: Path) -> str:
    """The failing runs' diagnosis (harness diagnose OUT_DIR, brief), or why there is none."""
    try:
        findings = diagnose.diagnose(diagnose.collect([str(out_dir)]))
    except diagnose.DiagnoseError as e:
        return f"diagnosis: none ({e})"
    return diagnose.render(findings, brief=True)
