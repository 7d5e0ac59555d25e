"""`python -m harness exposure-cost`: what the exposure probes cost the trainer, probes on vs off
in one run (harness.bench.probe_overhead says how)."""

from __future__ import annotations

import argparse
import json
import sys

from dflash.config import apply_overrides
from dflash.presets import get as preset
from harness.args import UsageError, positive_int
from harness.bench.probe_overhead import measure

HELP = "what the exposure probes cost the trainer: tokens/s with probes on vs off, in one run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="tiny-cpu", help="dflash preset (default tiny-cpu)")
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=6,
        help="measured rounds, alternating off and on (default 6), after one discarded warm-up",
    )
    p.add_argument("--steps", type=positive_int, help="optimizer steps per round (default: the preset's)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="K=V",
        help="dflash override for every round (e.g. compile.backend=aot_eager)",
    )


def run(opts: argparse.Namespace) -> int:
    if opts.rounds < 2:
        raise UsageError("--rounds 1 measures probes off only; ask for 2 or more")
    cfg = apply_overrides(preset(opts.preset), ([f"train.steps={opts.steps}"] if opts.steps else []) + opts.sets)
    record = measure(cfg, opts.rounds)
    print(
        f"tokens/s probes off {record['tokens_per_s_off']:.1f}, on {record['tokens_per_s_on']:.1f} (best of "
        f"{len(record['rounds_off'])} and {len(record['rounds_on'])} rounds): on/off {record['on_over_off']}, "
        f"medians {record['on_over_off_median']}; steady half on/off {record['steady_on_over_off']}, medians "
        f"{record['steady_on_over_off_median']}",
        file=sys.stderr,
    )
    print(
        f"hook calls per round with probes on: {record['hook_calls_per_round']:.0f}, "
        f"{record['hook_ns']['compiled.call']:.0f}-{max(record['hook_ns'].values()):.0f} ns each with no window "
        f"open: {record['hook_share_of_round']:.4%} of a round's wall time",
        file=sys.stderr,
    )
    print(json.dumps(record), flush=True)
    return 0
