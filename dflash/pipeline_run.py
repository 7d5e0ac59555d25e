"""One run of the prepared pipeline (dflash.train.Trainer): the replica group and its checkpoints,
the stage threads under the supervisor, the stall watchdog, and how the run ends (a checkpoint,
the final record with export, compile cache and evaluation, or the failure's record).

Its limits after a signal or a stall are dflash.train's (SIGNAL_GRACE_S, SIGNAL_JOIN_S,
SIGNAL_SAVE_S, STALL_JOIN_S): the module docstring there says what each bounds.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from typing import TextIO

import torch

from dflash import checkpoint as ckpt_io
from dflash import compile_cache
from dflash.config import RunConfig
from dflash.corpus import heldout_prompts
from dflash.data import TokenDataset
from dflash.devices import DevicePlan
from dflash.evaluate import acceptance_length
from dflash.export import export_hf
from dflash.metrics import Metrics
from dflash.models import Models
from dflash.oracle import Oracle
from dflash.outcome import RunOutcome, failed_record, stall_record, training_record
from dflash.pipeline import PipelineResult, SignalStop
from dflash.prefetch import EpochPlanner
from dflash.replicas import ReplicaGroup
from dflash.stages import StageInputs, Stages, build_group, build_stages
from dflash.step_boundary import StepBoundary
from dflash.timeline import Timeline, pipeline_spans
from dflash.trainer_errors import WrongResult
from dflash.watchdog import EXIT_STALLED, Watchdog
from harness.runtime.fixes import FixSet
from harness.runtime.fixes.recommended_sets import Recommendation

SIGNAL_GRACE_S = 2.0
"""After SIGINT/SIGTERM, how long the pipeline may run on to reach a step boundary."""
SIGNAL_JOIN_S = 6.0
"""Threads are joined until this long after the signal (a stuck one is then left behind)."""
SIGNAL_SAVE_S = 8.5
"""A checkpoint written with a thread left behind must be done this long after the signal."""
STALL_JOIN_S = 3.0
"""After a stall, threads are joined this long (the stuck ones will not stop)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What `Trainer.prepare()` read, every bad-input check passed: the run's inputs."""

    resume: ckpt_io.Checkpoint | None
    models: Models
    train_ds: TokenDataset
    heldout: TokenDataset
    planner: EpochPlanner
    cache_loaded: str | None
    """What the compile cache load said (None: no cache file)."""


@dataclass(kw_only=True, slots=True)
class Setup:
    """What the trainer built before it read anything: the run's fixed parts."""

    cfg: RunConfig
    plan: DevicePlan
    fs: FixSet
    recommendation: Recommendation | None
    oracle: Oracle
    timeline: Timeline
    signals: SignalStop
    out: TextIO
    err: TextIO


class PipelineRun:
    """The pipeline of one prepared run, from the replica group's build to the run's outcome."""

    def __init__(self, setup: Setup, prepared: Prepared) -> None:
        s = setup
        self.cfg, self.plan, self.fs, self.recommendation = s.cfg, s.plan, s.fs, s.recommendation
        self.oracle, self.timeline, self.signals, self.out, self.err = s.oracle, s.timeline, s.signals, s.out, s.err
        self.prepared = prepared
        self.watchdog: Watchdog | None = None
        self.group: ReplicaGroup | None = None
        self.checkpoints: ckpt_io.RunCheckpoints | None = None
        self.metrics: Metrics | None = None

    def run(self) -> RunOutcome:
        cfg = self.cfg
        start_step = self.prepared.resume.step if self.prepared.resume is not None else 0
        self.metrics = Metrics(
            stage_threads={
                "prefetch": cfg.pipeline.num_prefetch_threads,
                "target": cfg.pipeline.num_target_threads,
                "drafter": cfg.pipeline.num_drafter_threads,
            },
            log_interval_s=cfg.train.log_interval_s,
            total_steps=cfg.train.steps,
            start_step=start_step,
            progress=cfg.train.progress,
            out=self.out,
        )
        try:
            result = self._run_pipeline(start_step)
        finally:
            self.metrics.close()
        return self._conclude(result)

    def _stage_inputs(self) -> StageInputs:
        return StageInputs(
            cfg=self.cfg,
            plan=self.plan,
            fs=self.fs,
            models=self.prepared.models,
            train_ds=self.prepared.train_ds,
            planner=self.prepared.planner,
            metrics=self.metrics,
            oracle=self.oracle,
            timeline=self.timeline,
        )

    def _build_group(self, inp: StageInputs, start_step: int) -> ReplicaGroup:
        """The replica group, its step boundary and its checkpoints, at the resumed state."""
        boundary = StepBoundary(self.cfg.train, self.metrics, self.signals)
        self.group = build_group(inp, start_step, boundary.after_update, boundary.should_finish)
        self.checkpoints = boundary.checkpoints = ckpt_io.RunCheckpoints(self.cfg, self.group)
        if self.prepared.resume is not None:
            self.group.load(
                self.prepared.resume.drafter, self.prepared.resume.optimizer, self.prepared.resume.scheduler
            )
        return self.group

    def _run_pipeline(self, start_step: int) -> PipelineResult:
        inp = self._stage_inputs()
        # Named, so that nothing before the gate goes unaccounted: the replica group and the stage
        # threads (with torch.optim's own AdamW, also its import of torch._dynamo: dflash.adamw).
        with self.timeline.phase("pipeline_build"):
            group = self._build_group(inp, start_step)
            stages = build_stages(inp, group, start_step)
        self.watchdog = self._watch(stages)
        self.watchdog.start()
        t_pipe = time.monotonic()
        try:
            with self.timeline.phase("pipeline", record=False):
                return stages.supervisor.run(lambda: self._should_abort(stages), self._join_by)
        finally:
            pipeline_spans(self.timeline, t_pipe, time.monotonic(), self.metrics.opened_at(), self.metrics.step_times())
            # After a stall the watchdog is still printing the diagnosis: let it finish.
            self.watchdog.stop(5.0 if self.watchdog.stall is None else self.watchdog.diagnose_timeout_s + 5)

    def _watch(self, stages: Stages) -> Watchdog:
        """The stall watchdog over the replica group's step count (not started)."""
        cfg = self.cfg
        return Watchdog(
            progress=lambda: self.group.step,
            stall_s=cfg.train.stall_s,
            first_step_stall_s=cfg.train.first_step_stall_s,
            out_dir=cfg.train.out_dir,
            err=self.err,
            on_stall=stages.supervisor.wake,
            quiet=lambda: self.signals.requested or stages.stop.is_set(),
        )

    def _should_abort(self, stages: Stages) -> bool:
        """Stop the pipeline where it is: a stall, a second signal, a signal before the first
        step could run, or a step boundary that did not come within SIGNAL_GRACE_S."""
        if self.watchdog is not None and self.watchdog.stall is not None:
            return True
        sig = self.signals
        return sig.count >= 2 or (sig.requested and (not stages.gate.is_open or sig.since() > SIGNAL_GRACE_S))

    def _join_by(self) -> float | None:
        caps = []
        if self.signals.at is not None:
            caps.append(self.signals.at + SIGNAL_JOIN_S)
        if self.watchdog is not None and self.watchdog.stall is not None:
            caps.append(self.watchdog.stall.at + STALL_JOIN_S)
        return min(caps) if caps else None

    def _conclude(self, result: PipelineResult) -> RunOutcome:
        stall = self.watchdog.stall if self.watchdog is not None else None
        if stall is not None and not any(f.at < stall.at for f in result.failures):
            self._failed(stall_record(stall))
            return RunOutcome(exit_code=EXIT_STALLED, pipeline=result, stall=stall)
        if result.alive and self.signals.requested and not result.failures:
            return self._stopped_with_threads_alive(result)
        # A thread still alive may hold a device that no longer answers: do not read its state.
        state = self.group.state() if not result.alive else {}
        if result.failures or result.alive:
            self._failed()
            wrong = next((f for f in result.failures if isinstance(f.exc, WrongResult)), None)
            if wrong is not None and result.failures[0] is wrong:
                return RunOutcome(exit_code=3, pipeline=result, wrong_result=str(wrong.exc), state=state)
            return RunOutcome(exit_code=1, pipeline=result, state=state)
        with self.timeline.phase("checkpoint"):
            path = self.checkpoints.save(self.group.step)
        if self.signals.requested:
            return RunOutcome(exit_code=self.signals.exit_code, pipeline=result, checkpoint=path, state=state)
        return self._completed(result, path, state)

    def _completed(self, result: PipelineResult, path: str, state: dict) -> RunOutcome:
        final = self._finish()
        final["checkpoint"] = path
        final["phases"] = self.timeline.record()
        self.metrics.emit(final)
        print(self.timeline.line(final["phases"]), file=self.err, flush=True)
        # A signal during evaluation/export cannot stop a step any more; still report it.
        code = self.signals.exit_code if self.signals.requested else 0
        return RunOutcome(
            exit_code=code,
            final=final,
            pipeline=result,
            checkpoint=path,
            state=state,
            steady_window=self.metrics.steady_window(),
        )

    def _stopped_with_threads_alive(self, result: PipelineResult) -> RunOutcome:
        """A signal, and a thread that did not stop by SIGNAL_JOIN_S: checkpoint if that can be
        done by SIGNAL_SAVE_S without the stuck thread, exit with the signal's code anyway."""
        assert self.signals.at is not None
        path, why = self.checkpoints.save_by(self.signals.at + SIGNAL_SAVE_S)
        return RunOutcome(exit_code=self.signals.exit_code, pipeline=result, checkpoint=path, detail=why)

    def _failed(self, extra: dict | None = None) -> None:
        self.metrics.emit(failed_record(self.plan, self.fs, self.timeline.record(), extra))

    def _finish(self) -> dict:
        """Export, compile cache and evaluation after a clean run; the final record."""
        cfg = self.cfg
        export_dir = None
        if cfg.train.export:
            export_dir = os.path.join(cfg.train.out_dir, "export")
            with self.timeline.phase("export"):
                export_hf(self.prepared.models.objectives[0].drafter, cfg, export_dir)
        cache = None
        if cfg.compile.cache_file:
            with self.timeline.phase("compile_cache_save"):
                cache = compile_cache.save(cfg.compile.cache_file)
        with self.timeline.phase("evaluation"):
            tau = self._tau()
        return {
            **training_record(self.metrics, self.group.step, tau),
            "torch": torch.__version__,
            "device_plan": self.plan.describe(),
            "gpu_mem_peak_gib": self.plan.peak_reserved_gib(),
            "fixes": list(self.fs.names()),
            "fixes_recommended": self.recommendation.line() if self.recommendation else None,
            "fix_counts": dict(self.fs.counts),
            "fix_stats": {f.name: f.stats() for f in self.fs.fixes if hasattr(f, "stats")} or None,
            "oracle": self.oracle.summary(),
            "export": export_dir,
            "compile_cache": {"loaded": self.prepared.cache_loaded, "saved": cache}
            if cfg.compile.cache_artifacts
            else None,
        }

    def _tau(self) -> float | None:
        """Acceptance length of the trained drafter on held-out prompts (real draft-verify loop)."""
        cfg = self.cfg
        if cfg.train.eval_prompts <= 0:
            return None
        prompts = heldout_prompts(self.prepared.heldout, cfg.train.eval_prompts)
        target = self.prepared.models.targets[self.plan.target[0]]
        obj = self.prepared.models.objectives[0]
        if obj.drafter.fc.weight.device != target.device:
            obj = copy.deepcopy(obj).to(target.device)
        return float(acceptance_length(target, obj, prompts, cfg.train.eval_new_tokens))
