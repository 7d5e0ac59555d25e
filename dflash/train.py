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
import dataclasses
import sys
from collections.abc import Iterator
from typing import TextIO

import torch

from dflash import checkpoint as ckpt_io
from dflash import compile_cache
from dflash.config import RunConfig
from dflash.corpus import load_data
from dflash.cuda_start import CudaStart
from dflash.devices import DevicePlan, resolve
from dflash.models import build_models
from dflash.oracle import Oracle
from dflash.outcome import RunOutcome
from dflash.pipeline import SignalStop
from dflash.pipeline_run import STALL_JOIN_S, PipelineRun, Prepared, Setup
from dflash.prefetch import EpochPlanner
from dflash.target import DTYPES, embedded_shape
from dflash.timeline import Timeline
from harness.runtime import failpoints as faults
from harness.runtime.errors import ConfigError
from harness.runtime.fixes import FixSet, check_cuda_graphs
from harness.runtime.fixes.recommended_sets import Recommendation, resolve_names


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
        self.pipeline: PipelineRun | None = None
        """The run of the pipeline, once run() has prepared it."""

    def prepare(self) -> Prepared:
        """Everything that can be bad input; writes nothing under train.out_dir."""
        cfg, tl = self.cfg, self.timeline
        with tl.phase("setup"):
            self._check_plan()
            resume = ckpt_io.resume_state(cfg, self.err)
            compile_cache.check(cfg.compile.cache_artifacts)
        cache_loaded = None
        with self._cuda_started():
            if cfg.compile.cache_file:
                with tl.phase("compile_cache_load"):
                    cache_loaded = compile_cache.load(cfg.compile.cache_file)
                print(f"compile cache: {cache_loaded}", file=self.err, flush=True)
            with tl.phase("target_load"):
                models = build_models(cfg, self.plan)
        first = models.targets[self.plan.target[0]]
        with tl.phase("corpus"):
            train_ds, heldout = load_data(cfg, first, self.err, tl.note)
        planner = EpochPlanner(train_ds.lengths, cfg.data)
        if self.recommendation is not None:
            # After every input check: bad input still prints exactly one `error:` line.
            print(self.recommendation.line(), file=self.err, flush=True)
        return Prepared(resume, models, train_ds, heldout, planner, cache_loaded)

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
            prepared = self.prepare()
            if self.handle_signals:
                self.signals.install()
            try:
                return self._run_prepared(prepared)
            finally:
                self.signals.restore()
        finally:
            self.timeline.close()

    def _run_prepared(self, prepared: Prepared) -> RunOutcome:
        setup = Setup(
            cfg=self.cfg,
            plan=self.plan,
            fs=self.fs,
            recommendation=self.recommendation,
            oracle=self.oracle,
            timeline=self.timeline,
            signals=self.signals,
            out=self.out,
            err=self.err,
        )
        self.pipeline = PipelineRun(setup, prepared)
        return self.pipeline.run()


def train(
    cfg: RunConfig, *, out: TextIO | None = None, err: TextIO | None = None, handle_signals: bool = False
) -> RunOutcome:
    """Run one training job (see the module docstring for the error contract)."""
    return Trainer(cfg, out=out, err=err, handle_signals=handle_signals).run()
