"""`python -m harness lift`: lift benchmark: per-trial reproduction probability of F2 and R5, plain vs under scheduler plans."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from harness.args import UsageError
from harness.campaign import lift
from harness.trial.spec import REPO_ROOT

HELP = "per-trial reproduction probability of F2 and R5, plain vs under scheduler plans"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trials", type=int, default=10, help="trials per configuration (10)")
    p.add_argument("--workers", type=int, default=1, help="trials run at once (1)")
    p.add_argument("--targets", default="F2,R5", help="comma list of F2, R5")
    p.add_argument("--seed", type=int, default=0, help="plan seed of trial 0 (trial i: seed+i)")
    p.add_argument("--replays", type=int, default=0, help="replays of a reproducing F2 trial")
    p.add_argument("--replay-profile", default="fx-widen", help="F2 plan whose trial is replayed")
    p.add_argument("--f2-repro", action="store_true", help="F2 from repro/r06 (saturated plain)")
    p.add_argument("--out", default=None, help="artefacts folder (default runs/lift/<utc time>)")


def run(args: argparse.Namespace) -> int:
    if args.trials < 1 or args.workers < 1 or args.replays < 0:
        raise UsageError("--trials and --workers must be >= 1, --replays >= 0")
    unknown = set(args.targets.split(",")) - set(lift.targets())
    if unknown:
        raise UsageError(f"unknown target(s) {', '.join(sorted(unknown))} (known: F2, R5)")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out or REPO_ROOT / "runs" / "lift" / stamp)
    all_targets = lift.targets(f2_repro=args.f2_repro)
    chosen = [all_targets[name] for name in args.targets.split(",")]
    print(f"lift: torch {lift.torch_version()}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, {args.trials} trials/config, "
          f"{args.workers} workers, artefacts {out}", flush=True)
    for t in chosen:
        print(f"  {t.name}: {' '.join(t.workload.argv)}", flush=True)
    cells = lift.run_cells(chosen, args.trials, args.workers, args.seed, out)
    print(lift.format_table(cells))
    for t in chosen:
        print(f"best plan for {t.name}: {lift.best_plan(cells, t.name)}")
    if args.replays and "F2" in args.targets.split(","):
        f2 = all_targets["F2"]
        cell = next(c for c in cells if c.target == "F2" and c.profile == args.replay_profile)
        print(lift.measure_replays(f2, cell, args.replays, args.workers, out))
    (out / "lift.json").write_text(json.dumps(
        [{"target": c.target, "profile": c.profile, "k": sum(c.hits), "n": len(c.hits),
          "trials": [r.trial_id for r in c.results]} for c in cells], indent=2) + "\n")
    return 0
