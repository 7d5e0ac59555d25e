"""`python -m harness shrink`: which parts of a failing trial's fault plan the failure needs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from harness.args import positive_int
from harness.campaign.shrink import Shrinker, describe, minimal_plan
from harness.stores.discovery import find_trial, trial_stores_given
from harness.stores.store import safe_name, write_atomic
from harness.trial.spec import TrialSpec

HELP = "which parts of a failing trial's fault plan the failure needs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial_id")
    p.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")
    p.add_argument("-n", "--times", type=positive_int, default=5, help="runs per candidate plan (default 5)")
    p.add_argument("-p", "--workers", type=positive_int, help="runs at once (default: min(n, cores))")
    p.add_argument("--json", action="store_true")


def run(opts: argparse.Namespace) -> int:
    stores = trial_stores_given(opts.store)
    record, store_dir = find_trial(opts.trial_id, stores)
    shrinker = Shrinker(record, store_dir, opts.times, opts.workers or min(opts.times, os.cpu_count() or 1), sys.stderr)
    steps = shrinker.run()
    if steps[0].reproduced == 0:
        print(
            f"0/{opts.times} runs of {record.trial_id} under its own plan reproduced "
            f"{record.signature_summary or record.outcome.name!r}: nothing to shrink (raise -n?)"
        )
        return 1
    plan, measured = minimal_plan(steps)
    out = shrinker.store.root / f"{safe_name(record.trial_id)}.min-spec.json"
    spec: TrialSpec = dataclasses.replace(shrinker.spec, trial_id=f"{record.trial_id}~min", plan=plan)
    write_atomic(out, (json.dumps(spec.to_json(), indent=2) + "\n").encode())
    minimal = describe(shrinker.spec.plan, measured)
    summary = {
        "trial_id": record.trial_id,
        "signature_summary": record.signature_summary,
        "runs_per_step": opts.times,
        "steps": [{"label": s.label, "reproduced": s.reproduced, "runs": s.runs, "removed": s.kept} for s in steps],
        "minimal": minimal,
        "minimal_reproduced": measured.reproduced,
        "spec": str(out),
    }
    if opts.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"minimal plan of {record.trial_id}: {minimal}; reproduced {measured.reproduced}/{measured.runs} "
            f"({measured.label}); spec: {out} (python -m harness run {out})"
        )
    return 0
