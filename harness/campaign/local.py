"""Running one trial on this host, and the signal that a trial ran nowhere.

`run_local` is the local backend's run (harness.campaign.backends): the trial in a subprocess of
this process through the runner. `TrialNotRun` is what any backend raises for a trial that has no
record to store (its Ray node died, or it reached a worker too late); every engine stores nothing
for it and says so.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.trial.outcome import TrialResult
from harness.trial.runner import Judge, run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec


class TrialNotRun(Exception):
    """Raised by a pool's `run_fn` for a trial that has no record to store: its worker or node was
    lost mid-trial (harness.campaign.ray_backend), or it reached a worker only after --max-time
    or --finish-by (`late`). The pool stores nothing for it, goes on with the others, and a
    resumed run runs it (never a half-written record)."""

    def __init__(self, why: str, *, late: bool = False) -> None:
        super().__init__(why)
        self.late = late


def run_local(trial: TrialSpec, artefacts: Path, judge: Judge | None = None) -> TrialResult:
    """The local pool's `run_fn`: the trial in a subprocess of this process, its folder `artefacts`."""
    return run_trial(with_run_dir(trial, artefacts), artefacts, judge=judge)


def with_run_dir(trial: TrialSpec, artefacts: Path) -> TrialSpec:
    """A dflash trial writes its checkpoints and export under its own artefacts folder: presets
    share one `train.out_dir`, and concurrent trials must not overwrite each other's files."""
    if trial.workload.kind != "dflash":
        return trial
    argv = trial.workload.argv + ("--set", f"train.out_dir={Path(artefacts).resolve() / 'run'}")
    return dataclasses.replace(trial, workload=WorkloadSpec(kind="dflash", argv=argv))
