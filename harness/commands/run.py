"""`python -m harness run SPEC.json`: one trial from a TrialSpec JSON file, its record printed as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.args import UsageError
from harness.stores.store import safe_name
from harness.trial.outcome import Outcome
from harness.trial.runner import run_trial
from harness.trial.spec import InvalidSpec, TrialSpec

HELP = "run one trial from a TrialSpec JSON file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec")
    p.add_argument("--artefacts", help="artefacts folder (default: runs/trials/<trial id>)")


def run(opts: argparse.Namespace) -> int:
    try:
        text = Path(opts.spec).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read trial spec {opts.spec}: {e.strerror or e}") from None
    spec = TrialSpec.from_json(text)
    artefacts = Path(opts.artefacts) if opts.artefacts else Path("runs") / "trials" / safe_name(spec.trial_id)
    result = run_trial(spec, artefacts)
    print(json.dumps(result.to_json(), sort_keys=True))
    if result.outcome is Outcome.HARNESS_ERROR:
        raise InvalidSpec(result.detail)
    return 0 if result.outcome is Outcome.OK else 1
