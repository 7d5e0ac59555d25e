"""What happens between two optimizer steps: the replica leader records the step (metrics,
heartbeat), writes the periodic checkpoint, and asks whether the run should finish there."""

from __future__ import annotations

from dflash.checkpoint import RunCheckpoints
from dflash.config import TrainConfig
from dflash.heartbeat import beat
from dflash.metrics import Metrics
from dflash.pipeline import SignalStop
from dflash.step import StepResult


class StepBoundary:
    """The replica group's `after_update` and `should_finish`; `checkpoints` is set once the group
    it saves exists (the group is built with these callbacks)."""

    def __init__(self, tcfg: TrainConfig, metrics: Metrics, signals: SignalStop) -> None:
        self.tcfg = tcfg
        self.metrics = metrics
        self.signals = signals
        self.checkpoints: RunCheckpoints | None = None

    def after_update(self, step: int, results: list[StepResult]) -> None:
        self.metrics.record_step(
            step=step,
            loss=sum(float(r.loss) for r in results) / len(results),
            tokens=sum(r.tokens for r in results),
            correct=sum(r.correct.float().cpu() for r in results),
            counts=sum(r.counts.float().cpu() for r in results),
        )
        beat()
        every = self.tcfg.checkpoint_every
        if every and step % every == 0 and step < self.tcfg.steps:
            self.checkpoints.save(step)

    def should_finish(self) -> bool:
        """Asked by the replica leader after each step: a signal or train.stop_at_step."""
        stop_at = self.tcfg.stop_at_step
        return self.signals.requested or bool(stop_at and self.checkpoints.group.step >= stop_at)
