"""A stored trial's record as the store tests write them: its cell and index read from its id."""

from __future__ import annotations

from harness.trial.outcome import Outcome, TrialResult


def record(trial_id: str, outcome: Outcome = Outcome.OK, **fields) -> TrialResult:
    """`matrix/cell/index` -> the record of that trial, with `fields` (artefacts, signature...)."""
    _, cell, index = trial_id.rsplit("/", 2)
    return TrialResult(trial_id=trial_id, cell=cell, trial_index=int(index), outcome=outcome, **fields)
