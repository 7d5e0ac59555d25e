"""`train(cfg)`: validate, build, run the threaded pipeline, checkpoint, evaluate, export.

Order matters for the process contract: everything that can be bad input (fixes, fault plan,
device plan, target, data, vocabulary, bucket fit, checkpoint to resume) is checked before the
output folder is touched, so a bad run writes nothing and exits 2. Then the pipeline runs
(pipeline.Supervisor); a thread failure ends the run with exit 1 and one report per failed
thread, a non-finite loss or a step the differential oracle (dflash.oracle, train.oracle_every)
finds wrong with exit 3, SIGINT/SIGTERM with a checkpoint and exit 130/143, no step
for train.stall_s with a stack dump and exit 4 (dflash.watchdog).

SIGINT/SIGTERM: the run stops at the next step boundary if one comes within SIGNAL_GRACE_S, else
the pipeline is stopped where it is; either way everything is over within about 10 s. A thread
stuck in a compile or a long C call cannot be interrupted: it is joined until SIGNAL_JOIN_S after
the signal, the checkpoint is written if the replica group is not mid-update and the write ends
by SIGNAL_SAVE_S, the threads that did not stop are named with their frames, and the CLI leaves
with os._exit (dflash.cli.exit_process) instead of waiting for them.

The run's parts live in their own modules: dflash.models (target and drafter objectives),
dflash.corpus (the data), dflash.stages (channels, gate and stage threads), dflash.step_boundary
(what the replica leader does between steps), dflash.checkpoint (resume and saves),
dflash.outcome (the RunOutcome and the last record).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

import torch

from dflash import checkpoint as ckpt_io
from dflash import compile_cache
from dflash.config import RunConfig
from dflash.corpus import heldout_prompts, load_data
from dflash.cuda_start import CudaStart
from dflash.data import TokenDataset
from dflash.devices import DevicePlan, resolve
from dflash.evaluate import acceptance_length
from dflash.export import export_hf
from dflash.metrics import Metrics
from dflash.models import Models, build_models
from dflash.oracle import Oracle
from dflash.outcome import RunOutcome, failed_record, stall_record, training_record
from dflash.pipeline import PipelineResult, SignalStop
from dflash.prefetch import EpochPlanner
from dflash.replicas import ReplicaGroup
from dflash.stages import StageInputs, Stages, build_group, build_stages
from dflash.step_boundary import StepBoundary
from dflash.target import DTYPES, embedded_shape
from dflash.timeline import Timeline, pipeline_spans
from dflash.trainer_errors import WrongResult
from dflash.watchdog import EXIT_STALLED, Watchdog
from harness.runtime import failpoints as faults
from harness.runtime.errors import ConfigError
from harness.runtime.fixes import FixSet, check_cuda_graphs
from harness.runtime.fixes.recommended_sets import Recommendation, resolve_names

SIGNAL_GRACE_S = 2.0
"""After SIGINT/SIGTERM, how long the pipeline may run on to reach a step boundary."""
SIGNAL_JOIN_S = 6.0
"""Threads are joined until this long after the signal (a stuck one is then left behind)."""
SIGNAL_SAVE_S = 8.5
"""A checkpoint written with a thread left behind must be done this long after the signal."""
STALL_JOIN_S = 3.0
"""After a stall, threads are joined this long (the stuck ones will not stop)."""


class Trainer:
    """One training run; `run()` returns a RunOutcome (the CLI maps it to an exit code)."""

    def __init__(
        self, cfg: RunConfig, *, out: TextIO | None = None, err: TextIO | None = None, handle_signals: bool = False
    ) -> None:
        self.cfg = cfg
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.signals = SignalStop()
        self.handle_signals = handle_signals
        self.timeline = Timeline(self.err)
        with self.timeline.phase("setup"):
            faults.install_from_env()
            p = cfg.pipeline
            self.plan: DevicePlan = resolve(
                cfg.devices, num_target_threads=p.num_target_threads, num_drafter_threads=p.num_drafter_threads
            )
            names, self.recommendation = self._resolve_fixes(cfg)
            self.fs = FixSet.from_names(names)
            self.fs.process_start()  # the trainer is built in the thread that outlives its workers
            # The resolved names, so that checkpoints and records store what ran.
            self.cfg: RunConfig = dataclasses.replace(cfg, fixes=self.fs.names())
        self.oracle = Oracle(self.cfg.train)
        self.watchdog: Watchdog | None = None
        self.cache_loaded: str | None = None
        # Built by prepare() (reads data and models), then by the pipeline run:
        self.resume: ckpt_io.Checkpoint | None = None
        self.models: Models | None = None
        self.train_ds: TokenDataset | None = None
        self.heldout: TokenDataset | None = None
        self.planner: EpochPlanner | None = None
        self.metrics: Metrics | None = None
        self.group: ReplicaGroup | None = None
        self.checkpoints: ckpt_io.RunCheckpoints | None = None

    def prepare(self) -> None:
        """Everything that can be bad input; writes nothing under train.out_dir."""
        cfg, tl = self.cfg, self.timeline
        with tl.phase("setup"):
            self._check_plan()
            self.resume = ckpt_io.resume_state(cfg, self.err)
            compile_cache.check(cfg.compile.cache_artifacts)
        with self._cuda_started():
            if cfg.compile.cache_file:
                with tl.phase("compile_cache_load"):
                    self.cache_loaded = compile_cache.load(cfg.compile.cache_file)
                print(f"compile cache: {self.cache_loaded}", file=self.err, flush=True)
            with tl.phase("target_load"):
                self.models = build_models(cfg, self.plan)
        first = self.models.targets[self.plan.target[0]]
        with tl.phase("corpus"):
            self.train_ds, self.heldout = load_data(cfg, first, self.err, tl.note)
        self.planner = EpochPlanner(self.train_ds.lengths, cfg.data)
        if self.recommendation is not None:
            # After every input check: bad input still prints exactly one `error:` line.
            print(self.recommendation.line(), file=self.err, flush=True)

    @contextlib.contextmanager
    def _cuda_started(self) -> Iterator[None]:
        """The CUDA devices' first use (dflash.cuda_start) runs beside the body; the body's end waits
        for it (device_init: only what the body did not hide). A failing body waits a little, and
        raises its own error."""
        cfg, cuda = self.cfg, self.plan.cuda_devices()
        if not cuda:
            yield
            return
        # Process-wide, before any thread of ours runs attention. cuDNN's SDPA cost the first bf16
        # causal attention 0.42-0.81 s until the driver had compiled and cached its kernels, 75 ms
        # after, FlashAttention 3.4 ms (results/h100-2026-12-06-first-use).
        torch.backends.cuda.enable_cudnn_sdp(cfg.target.cudnn_attention)
        start = CudaStart(cuda, embedded_shape(cfg.target), DTYPES[cfg.target.dtype])
        try:
            yield start.start()
        except BaseException:
            with contextlib.suppress(Exception):  # the body's error is the one to report
                start.join(STALL_JOIN_S)
            raise
        with self.timeline.phase("device_init"):
            start.join()
        self.timeline.mark("cuda_ready_at", start.done_at)

    def _check_plan(self) -> None:
        """Refuse what the device plan cannot run before the target builds the corpus."""
        cfg = self.cfg
        if cfg.drafter.attention == "flex" and any(d.type == "cpu" for d in self.plan.drafter):
            # FlexAttention has no backward on CPU (NotImplementedError at the first backward).
            raise ConfigError(
                "drafter.attention=flex needs CUDA drafter devices (flex backward "
                "is not implemented on CPU); use auto or sdpa"
            )
        check_cuda_graphs(cfg.fixes, cfg.compile.cudagraphs and any(d.type == "cuda" for d in self.plan.drafter))

    def _resolve_fixes(self, cfg: RunConfig) -> tuple[tuple[str, ...], Recommendation | None]:
        """The run's fix names; `recommended` becomes the set for the installed torch, the plan's
        device kind and whether the drafter step records CUDA graphs (its line is printed once the
        input is checked)."""
        kind = "cuda" if any(d.type == "cuda" for d in (*self.plan.target, *self.plan.drafter)) else "cpu"
        return resolve_names(
            cfg.fixes, torch.__version__, kind, cudagraphs=cfg.compile.cudagraphs, compiled=cfg.compile.mode != "none"
        )

    def run(self) -> RunOutcome:
        # Started here, not in prepare(), so that it is always closed below.
        self.timeline.start_ticker()
        try:
            self.prepare()
            if self.handle_signals:
                self.signals.install()
            try:
                return self._run_prepared()
            finally:
                self.signals.restore()
        finally:
            self.timeline.close()

    def _run_prepared(self) -> RunOutcome:
        cfg = self.cfg
        start_step = self.resume.step if self.resume is not None else 0
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
            models=self.models,
            train_ds=self.train_ds,
            planner=self.planner,
            metrics=self.metrics,
            oracle=self.oracle,
            timeline=self.timeline,
        )

    def _build_group(self, inp: StageInputs, start_step: int) -> ReplicaGroup:
        """The replica group, its step boundary and its checkpoints, at the resumed state."""
        boundary = StepBoundary(self.cfg.train, self.metrics, self.signals)
        self.group = build_group(inp, start_step, boundary.after_update, boundary.should_finish)
        self.checkpoints = boundary.checkpoints = ckpt_io.RunCheckpoints(self.cfg, self.group)
        if self.resume is not None:
            self.group.load(self.resume.drafter, self.resume.optimizer, self.resume.scheduler)
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
                export_hf(self.models.objectives[0].drafter, cfg, export_dir)
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
            "compile_cache": {"loaded": self.cache_loaded, "saved": cache} if cfg.compile.cache_artifacts else None,
        }

    def _tau(self) -> float | None:
        """Acceptance length of the trained drafter on held-out prompts (real draft-verify loop)."""
        cfg = self.cfg
        if cfg.train.eval_prompts <= 0:
            return None
        prompts = heldout_prompts(self.heldout, cfg.train.eval_prompts)
        target = self.models.targets[self.plan.target[0]]
        obj = self.models.objectives[0]
        if obj.drafter.fc.weight.device != target.device:
            obj = copy.deepcopy(obj).to(target.device)
        return float(acceptance_length(target, obj, prompts, cfg.train.eval_new_tokens))


def train(
    cfg: RunConfig, *, out: TextIO | None = None, err: TextIO | None = None, handle_signals: bool = False
) -> RunOutcome:
    """Run one training job (see the module docstring for the error contract)."""
    return Trainer(cfg, out=out, err=err, handle_signals=handle_signals).run()
