"""`python -m harness price`: what fixes cost alone on the machine: interleaved benches, paired ratios."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.analysis import bench_records
from harness.analysis.bench_records import BenchError
from harness.args import positive_float, positive_int
from harness.bench import pricing
from harness.bench.pricing import PriceError, make_plan, prices, resumed, save

HELP = "what fixes cost alone on the machine: interleaved benches, paired ratios"


def add_arguments(p: argparse.ArgumentParser) -> None:
    _bench_arguments(p)
    _run_arguments(p)


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    """What each bench runs: the configurations, the preset and its overrides, rounds and steps."""
    p.add_argument(
        "configs",
        nargs="+",
        metavar="FIXES[:MODE]",
        help="configurations, the first is the base: comma-separated fixes, then the compile "
        "mode (default the preset's): `global-lock,stash-incref`, `global-lock:default`, `:none` (eager)",
    )
    p.add_argument("--preset", default="tiny-cpu", help="dflash preset (default tiny-cpu)")
    p.add_argument(
        "--rounds", type=positive_int, default=3, help="benches per configuration, alternating order (default 3)"
    )
    p.add_argument("--steps", type=positive_int, default=60, help="optimizer steps per bench (default 60)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="K=V",
        help="dflash override for every bench (e.g. a device plan)",
    )
    p.add_argument(
        "--topology",
        type=int,
        metavar="GPUS",
        help="the seed trainer's device plan on this many GPUs (>= 4; 2-3: one target and one drafter per GPU)",
    )


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """How the run is bounded, recorded, resumed and judged."""
    p.add_argument("--timeout-s", type=positive_float, default=600.0, help="per bench (default 600)")
    p.add_argument(
        "--into", type=Path, help="append the bench records to this JSONL (harness.analysis.bench_records format)"
    )
    p.add_argument(
        "--run",
        "--call",
        dest="host_run",
        type=int,
        metavar="N",
        help="the GPU-host run's number recorded with them (the report groups benches by it)",
    )
    p.add_argument(
        "--max-time",
        dest="max_time_s",
        type=positive_float,
        metavar="S",
        help="start no bench that would not end within S seconds of the start; none runs past it",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on with the last run in --into: same run, only the benches it lacks",
    )
    p.add_argument(
        "--dumps",
        type=Path,
        metavar="DIR",
        help="where a bench past --timeout-s is dumped before the kill (default: beside --into, else a temporary folder)",
    )
    p.add_argument("--target", type=positive_float, help="say whether each ratio's interval clears this (e.g. 1.2)")


def run(opts: argparse.Namespace) -> int:
    if opts.resume and (opts.into is None or not opts.into.exists()):
        print("error: --resume needs --into with the run to resume", file=sys.stderr)
        return 2
    dumps = opts.dumps
    if dumps is None:
        dumps = opts.into.with_name(opts.into.stem + "-dumps") if opts.into is not None else None
    try:
        plan = make_plan(
            opts.preset,
            opts.configs,
            rounds=opts.rounds,
            steps=opts.steps,
            sets=opts.sets,
            timeout_s=opts.timeout_s,
            host_run=opts.host_run,
            topology=opts.topology,
            max_time_s=opts.max_time_s,
            dumps=dumps,
        )
        records: list[dict] = []
        if opts.into is not None and opts.into.exists():
            held = bench_records.read_records(opts.into)  # before an hour of benches, not after
            if opts.resume:
                records = resumed(plan, held)
    except (PriceError, BenchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    resumed_n = len(records)
    if records:
        print(f"resuming run {plan.run_id}: {len(records)} bench(es) already done", file=sys.stderr)
    try:
        pricing.run(
            plan, records=records, done=(lambda d: save([d], opts.into)) if opts.into is not None else (lambda d: None)
        )
    finally:
        # Stopped (SIGTERM from a run's time limit, Ctrl-C) or not: the rounds that ran are priced.
        if opts.into is not None:
            print(f"{opts.into}: {len(records) - resumed_n} bench record(s) added", file=sys.stderr)
        print(pricing.table(plan, prices(plan, records), opts.target), flush=True)
    return 1 if any(d.get("exit_code") for d in records) else 0
