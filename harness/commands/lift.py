"""`python -m harness lift`: lift benchmark: per-trial reproduction probability of races (CPU: F2, R5, F3; GPU: capture-r05, capture-r23, G2), plain vs under scheduler plans."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

from harness.args import UsageError, comma_list
from harness.campaign import lift
from harness.faults.profiles import PROFILES
from harness.stores.store import Store
from harness.trial.spec import REPO_ROOT

HELP = "per-trial reproduction probability of races, plain vs under scheduler plans (pct included)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trials", type=int, default=10, help="trials per configuration (10)")
    p.add_argument("--workers", type=int, default=1, help="trials run at once (1)")
    p.add_argument(
        "--targets", default="F2,R5", help="comma list of F2, R5, F3 (CPU), capture-r05, capture-r23, G2 (GPU) (F2,R5)"
    )
    p.add_argument(
        "--profiles",
        action="append",
        default=None,
        help="plans compared with plain, comma list (default: each target's own: "
        "switch, its race-specific plan, pct1, pct2, pct3)",
    )
    p.add_argument(
        "--calibrate",
        type=int,
        default=3,
        help="pct-count runs per target measuring PCT's k and n (3; 0: the stated default k)",
    )
    p.add_argument("--seed", type=int, default=0, help="plan seed of trial 0 (trial i: seed+i)")
    p.add_argument("--replays", type=int, default=0, help="replays of a reproducing F2 trial")
    p.add_argument("--replay-profile", default="fx-widen", help="F2 plan whose trial is replayed")
    p.add_argument("--f2-repro", action="store_true", help="F2 from repro/r06 (saturated plain)")
    p.add_argument(
        "--out", default=None, help="result store folder (default runs/lift/<utc time>; an existing one resumes)"
    )


def run(args: argparse.Namespace) -> int:
    if args.trials < 1 or args.workers < 1 or args.replays < 0 or args.calibrate < 0:
        raise UsageError("--trials and --workers must be >= 1, --replays and --calibrate >= 0")
    all_targets = lift.targets(f2_repro=args.f2_repro)
    names = args.targets.split(",")
    chosen, profiles = _chosen(args, all_targets, names)
    now = datetime.datetime.now(datetime.UTC)
    out = Path(args.out or REPO_ROOT / "runs" / "lift" / now.strftime("%Y%m%dT%H%M%SZ"))
    store = Store(out)
    print(
        f"lift: torch {lift.torch_version()}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, {args.trials} trials/config, "
        f"{args.workers} workers, store {out}",
        flush=True,
    )
    for t in chosen:
        print(f"  {t.name}: {' '.join(t.workload.argv)}", flush=True)
    cals = _calibrated(args, chosen, profiles, store)
    cells = lift.run_cells(chosen, profiles, args.trials, args.workers, args.seed, store, cals)
    print(lift.format_table(cells, cals))
    for t in chosen:
        print(f"best plan for {t.name}: {lift.best_plan(cells, t.name)}")
        versus = lift.pct_versus(cells, t.name)
        if versus:
            print(versus)
    if args.replays and "F2" in names:
        f2 = all_targets["F2"]
        cell = next(c for c in cells if c.target == "F2" and c.profile == args.replay_profile)
        print(lift.measure_replays(f2, cell, args.replays, args.workers, store))
    meta = {
        "command": "python -m harness " + shlex.join(sys.argv[1:]),
        "date": now.strftime("%Y-%m-%d"),
        "torch": lift.torch_version(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "targets": {t.name: list(t.workload.argv) for t in chosen},
    }
    (out / "lift.json").write_text(json.dumps(lift.to_json(cells, cals, meta), indent=2) + "\n")
    return 0


def _chosen(args: argparse.Namespace, all_targets: dict, names: list[str]) -> tuple[list, dict[str, tuple[str, ...]]]:
    """The named targets and each one's profiles (plain first), or a UsageError naming the unknown."""
    unknown = set(names) - set(all_targets)
    if unknown:
        raise UsageError(f"unknown target(s) {', '.join(sorted(unknown))} (known: {', '.join(all_targets)})")
    wanted = comma_list(args.profiles) if args.profiles else None
    bad = set(wanted or ()) - set(PROFILES)
    if bad:
        raise UsageError(f"unknown profile(s) {', '.join(sorted(bad))} (known: {', '.join(PROFILES)})")
    chosen = [all_targets[name] for name in names]
    return chosen, {t.name: ("plain", *(p for p in (wanted or t.profiles) if p != "plain")) for t in chosen}


def _calibrated(args: argparse.Namespace, chosen: list, profiles: dict, store: Store) -> dict:
    """PCT's k and n per target, measured where a chosen profile has a depth (--calibrate runs)."""
    cals = {}
    if args.calibrate and any(lift.depth_of(p) for ps in profiles.values() for p in ps):
        cals = lift.calibrate(chosen, args.calibrate, args.workers, args.seed, store)
    for name, cal in cals.items():
        print(
            f"calibration {name}: k={cal.k} n={cal.n} ({cal.source}: steps {cal.steps}, threads {cal.threads})",
            flush=True,
        )
    return cals
