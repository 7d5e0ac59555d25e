"""`python -m harness doctor`: what this torch/Python/CUDA means for threads (each fact probed in a subprocess)."""

from __future__ import annotations

import argparse
import json
import sys

from harness.args import positive_float
from harness.diagnosis import probes
from harness.diagnosis.doctor import build_report, format_text, to_json

HELP = "what this torch/Python/CUDA means for threads (each fact probed in a subprocess)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=probes.DEFAULT_TIMEOUT_S,
        help=f"seconds per probe subprocess (default {probes.DEFAULT_TIMEOUT_S:g})",
    )


def run(opts: argparse.Namespace) -> int:
    report = build_report(probes.run_probes(timeout_s=opts.timeout))
    if opts.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        sys.stdout.write(format_text(report))
    return 0
