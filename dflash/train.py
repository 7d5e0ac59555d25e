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
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np
import torch

from dflash import checkpoint as ckpt_io
from dflash import compile_cache
from dflash.buckets import summarize
from dflash.channel import Channel, OrderedReceiver, StartupGate, Turns
from dflash.config import RunConfig
from dflash.data import TokenDataset, open_dataset, split_for_training, validate_vocab
from dflash.devices import DevicePlan, resolve
from dflash.drafter import DFlashDrafter, resolve_layer_ids, resolve_mask_token_id
from dflash.drafter_loop import DrafterTrainLoop
from dflash.errors import ConfigError, WrongResult
from dflash.evaluate import acceptance_length
from dflash.export import export_hf
from dflash.heartbeat import beat
from dflash.metrics import Metrics
from dflash.objective import DFlashObjective
from dflash.oracle import Oracle
from dflash.pipeline import PipelineResult, SignalStop, Supervisor
from dflash.prefetch import BatchPrefetcher, EpochPlanner
from dflash.replicas import ReplicaGroup
from dflash.step import StepResult
from dflash.synthetic import ensure_synthetic_corpus
from dflash.target import TargetModel, build_target
from dflash.target_loop import TargetForwardLoop
from dflash.timeline import Timeline
from dflash.watchdog import EXIT_STALLED, Stall, Watchdog
from harness.runtime import failpoints as faults
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


@dataclass(kw_only=True, slots=True)
class Models:
    targets: dict[torch.device, TargetModel]
    objectives: list[DFlashObjective]
    """One per drafter thread (replica), each on its thread's device."""
    layer_ids: tuple[int, ...]
    vocab_size: int
    context_dim: int


@dataclass(kw_only=True, slots=True)
class RunOutcome:
    exit_code: int
    final: dict | None = None
    pipeline: PipelineResult | None = None
    checkpoint: str | None = None
    wrong_result: str | None = None
    state: dict = field(default_factory=dict)
    """drafter/optimizer/scheduler state at the end (tests compare parameters)."""
    steady_window: tuple[float, float] | None = None
    """`time.monotonic()` span of the steps tokens_per_s_steady measures (bench's GPU busy)."""
    stall: Stall | None = None
    """What the watchdog saw when it declared the run stalled (exit 4)."""
    detail: str | None = None
    """Why no checkpoint was written after a signal, when a thread did not stop."""


def build_models(cfg: RunConfig, plan: DevicePlan) -> Models:
    targets = {dev: build_target(cfg.target, dev) for dev in plan.target_devices()}
    first = targets[plan.target[0]]
    layer_ids = resolve_layer_ids(cfg.drafter, first.num_layers)
    mask_id = resolve_mask_token_id(cfg.drafter, first.vocab_size)
    base = DFlashDrafter(
        cfg.drafter,
        hidden_size=first.hidden_size,
        num_target_layers=first.num_layers,
        vocab_size=first.vocab_size,
        layer_ids=layer_ids,
    )
    # The frozen embedding and LM head are the target's; one read-only copy per drafter device.
    heads = {
        dev: (copy.deepcopy(first.embed_tokens).to(dev), copy.deepcopy(first.lm_head).to(dev))
        for dev in plan.drafter_devices()
    }
    objectives = [
        DFlashObjective(
            copy.deepcopy(base).to(dev),
            *heads[dev],
            cfg.drafter.block_size,
            mask_id,
            cfg.drafter.resolved_gamma(),
            cfg.drafter.attention,
            cfg.train.precision,
        )
        for dev in plan.drafter
    ]
    return Models(
        targets=targets,
        objectives=objectives,
        layer_ids=layer_ids,
        vocab_size=first.vocab_size,
        context_dim=len(layer_ids) * first.hidden_size,
    )


def target_cache_key(cfg: RunConfig) -> str:
    """Names the target that regenerated the synthetic corpus (different target, new file)."""
    blob = json.dumps(dataclasses.asdict(cfg.target), sort_keys=True)
    return f"{cfg.target.arch}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def load_data(cfg: RunConfig, target: TargetModel, err: TextIO, note=None) -> tuple[TokenDataset, TokenDataset]:
    """(train, heldout); DataError for unreadable data, vocab mismatch or a too-long sample.
    `note(text)` hears how far a corpus generation has got."""
    path = cfg.data.path
    if path is None:
        # DFlash trains on answers regenerated by the target itself (DFlash's training recipe).
        path = ensure_synthetic_corpus(
            cfg.data,
            _beating(target.greedy_generate, note, cfg.data.synthetic_samples),
            target.vocab_size,
            target_cache_key(cfg),
        )
    ds = open_dataset(path)
    validate_vocab(ds, target.vocab_size)
    train_ds, heldout = split_for_training(
        ds,
        min_loss_tokens=cfg.data.min_loss_tokens,
        heldout_samples=cfg.data.heldout_samples,
        seed=cfg.data.shuffle_seed,
    )
    print(
        summarize(
            train_ds.lengths,
            cfg.data.bucket_boundaries,
            cfg.data.token_budget,
            batching=cfg.data.batching,
            max_batch_rows=cfg.data.max_batch_rows,
        ),
        file=err,
        flush=True,
    )
    return train_ds, heldout


def _beating(generate, note=None, total: int = 0):
    """Heartbeat once per generate call: regenerating the corpus can take minutes, and the
    harness must see progress (not a hang) while it runs; `note` hears the samples done."""
    done = 0

    def wrapped(prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        nonlocal done
        beat()
        if note is not None:
            note(
                f"regenerating the synthetic corpus with the target: {done} of {total} samples, "
                f"{len(prompts)} more up to {max_new_tokens} tokens"
            )
        out = generate(prompts, max_new_tokens)
        done += len(prompts)
        return out

    return wrapped


def _resume_state(cfg: RunConfig, err: TextIO) -> ckpt_io.Checkpoint | None:
    if not cfg.train.resume:
        return None
    if ckpt_io.find(cfg.train.out_dir) is None:
        print(f"resume: no checkpoint under {cfg.train.out_dir}, starting at step 0", file=err)
        return None
    ck = ckpt_io.load(cfg.train.out_dir)
    num_rep = cfg.pipeline.num_drafter_threads
    if ck.data_seq != ck.step * num_rep:
        # The data position is step * M: another M would silently train on other batches.
        raise ConfigError(
            f"checkpoint {ck.path} was written with {ck.data_seq // max(ck.step, 1)} "
            f"drafter threads; resume needs pipeline.num_drafter_threads to match "
            f"(got {num_rep})"
        )
    return ck


def _loss_window(losses: list[float]) -> tuple[float | None, float | None]:
    """Mean loss over the first and the last 10% of steps (at least one step each)."""
    if not losses:
        return None, None
    k = max(1, len(losses) // 10)
    return sum(losses[:k]) / k, sum(losses[-k:]) / k


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

    def prepare(self) -> None:
        """Everything that can be bad input; writes nothing under train.out_dir."""
        cfg, tl = self.cfg, self.timeline
        with tl.phase("setup"):
            if cfg.drafter.attention == "flex" and any(d.type == "cpu" for d in self.plan.drafter):
                # FlexAttention has no backward on CPU (NotImplementedError at the first backward);
                # refuse up front rather than after the target has built the corpus.
                raise ConfigError(
                    "drafter.attention=flex needs CUDA drafter devices (flex backward "
                    "is not implemented on CPU); use auto or sdpa"
                )
            check_cuda_graphs(cfg.fixes, cfg.compile.cudagraphs and any(d.type == "cuda" for d in self.plan.drafter))
            self.resume = _resume_state(cfg, self.err)
            compile_cache.check(cfg.compile.cache_artifacts)
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
            result, group = self._run_pipeline(start_step)
        finally:
            self.metrics.close()
        return self._conclude(result, group)

    def _after_update(self, step: int, results: list[StepResult]) -> None:
        self.metrics.record_step(
            step=step,
            loss=sum(float(r.loss) for r in results) / len(results),
            tokens=sum(r.tokens for r in results),
            correct=sum(r.correct.float().cpu() for r in results),
            counts=sum(r.counts.float().cpu() for r in results),
        )
        beat()
        every = self.cfg.train.checkpoint_every
        if every and step % every == 0 and step < self.cfg.train.steps:
            self._save(step)

    def _should_finish(self) -> bool:
        """Asked by the replica leader after each step: a signal or train.stop_at_step."""
        stop_at = self.cfg.train.stop_at_step
        return self.signals.requested or bool(stop_at and self.group.step >= stop_at)

    def _save(self, step: int, state: dict | None = None) -> str:
        """Write the checkpoint of `step` from the replica group's `state` (read now if None)."""
        st = self.group.state() if state is None else state
        return ckpt_io.save(
            self.cfg.train.out_dir,
            ckpt_io.Checkpoint(
                step=step,
                data_seq=step * self.group.num_replicas,
                config=self.cfg.to_dict(),
                drafter=st["drafter"],
                optimizer=st["optimizer"],
                scheduler=st["scheduler"],
            ),
        )

    def _run_pipeline(self, start_step: int) -> tuple[PipelineResult, ReplicaGroup]:
        cfg, p, m = self.cfg, self.cfg.pipeline, self.models
        stop = threading.Event()
        tokens = Channel("tokens", p.queue_depth, stop, p.poll_s)
        hidden = Channel("hidden", p.queue_depth, stop, p.poll_s)
        receiver = OrderedReceiver(hidden, lambda hb: hb.tokens.seq, stop, p.poll_s)
        self.metrics.watch(lambda: {"tokens": tokens.depth(), "hidden": hidden.depth(), "reorder": receiver.buffered()})
        gate = StartupGate(
            p.num_drafter_threads, stop, timeout_s=p.startup_timeout_s, poll_s=p.poll_s, on_open=self.metrics.start
        )
        self.group = group = ReplicaGroup(
            [o.drafter for o in m.objectives],
            cfg.train,
            start_step=start_step,
            after_update=self._after_update,
            should_finish=self._should_finish,
        )
        if self.resume is not None:
            group.load(self.resume.drafter, self.resume.optimizer, self.resume.scheduler)
        persistent = self.fs.active("persistent-buffers")
        pad_to = cfg.data.bucket_boundaries[-1] if persistent else None
        pad_rows = self.planner.max_rows() if persistent else None
        prefetch = BatchPrefetcher(
            ds=self.train_ds,
            planner=self.planner,
            out=tokens,
            num_threads=p.num_prefetch_threads,
            start_seq=start_step * p.num_drafter_threads,
            end_seq=cfg.train.steps * p.num_drafter_threads,
            gate=gate,
            metrics=self.metrics,
            pad_to=pad_to,
            pad_rows=pad_rows,
        )
        target = TargetForwardLoop(
            targets=m.targets,
            devices=self.plan.target,
            layer_ids=m.layer_ids,
            inp=tokens,
            out=hidden,
            ccfg=cfg.compile,
            fs=self.fs,
            metrics=self.metrics,
        )
        drafter = DrafterTrainLoop(
            objectives=m.objectives,
            devices=self.plan.drafter,
            receiver=receiver,
            group=group,
            gate=gate,
            turns=Turns(p.num_drafter_threads, stop, p.poll_s),
            cfg=cfg,
            fs=self.fs,
            metrics=self.metrics,
            warmup_shapes=self.planner.shapes(pad_to, pad_rows),
            vocab_size=m.vocab_size,
            context_dim=m.context_dim,
            oracle=self.oracle if self.oracle.every else None,
            doc_ids=self.train_ds.has_doc_ids,
            timeline=self.timeline,
        )
        sup = Supervisor(stop=stop, fs=self.fs, shutdown_deadline_s=p.shutdown_deadline_s, poll_s=p.poll_s)
        sup.on_stop(group.abort)
        for k in range(p.num_prefetch_threads):
            sup.add(f"dflash-prefetch-{k}", "prefetch", _bind(prefetch.run, k))
        for n in range(p.num_target_threads):
            sup.add(f"dflash-target-{n}", "target", _bind(target.run, n))
        for r in range(p.num_drafter_threads):
            sup.add(f"dflash-train-{r}", "drafter", _bind(drafter.run, r), finisher=True)
        self.watchdog = Watchdog(
            progress=lambda: group.step,
            stall_s=cfg.train.stall_s,
            first_step_stall_s=cfg.train.first_step_stall_s,
            out_dir=cfg.train.out_dir,
            err=self.err,
            on_stall=sup.wake,
            quiet=lambda: self.signals.requested or stop.is_set(),
        )
        self.watchdog.start()
        t_pipe = time.monotonic()
        try:
            with self.timeline.phase("pipeline", record=False):
                return sup.run(lambda: self._should_abort(gate), self._join_by), group
        finally:
            self._pipeline_phases(t_pipe, time.monotonic())
            # After a stall the watchdog is still printing the diagnosis: let it finish.
            self.watchdog.stop(5.0 if self.watchdog.stall is None else self.watchdog.diagnose_timeout_s + 5)

    def _pipeline_phases(self, start: float, end: float) -> None:
        """Split the pipeline's time at the startup gate and the first and last steps: warm-up
        (every drafter thread compiling and warming up), first step, training, shutdown."""
        tl, opened, marks = self.timeline, self.metrics.opened_at(), self.metrics.step_times()
        if opened is None:
            tl.span("warmup", start, end)
            return
        tl.span("warmup", start, opened)
        tl.mark("gate_open_at", opened)
        if not marks:
            tl.span("first_step", opened, end)
            return
        tl.span("first_step", opened, marks[0])
        tl.mark("first_step_at", marks[0])
        tl.span("training", marks[0], marks[-1])
        tl.span("shutdown", marks[-1], end)

    def _should_abort(self, gate: StartupGate) -> bool:
        """Stop the pipeline where it is: a stall, a second signal, a signal before the first
        step could run, or a step boundary that did not come within SIGNAL_GRACE_S."""
        if self.watchdog is not None and self.watchdog.stall is not None:
            return True
        sig = self.signals
        return sig.count >= 2 or (sig.requested and (not gate.is_open or sig.since() > SIGNAL_GRACE_S))

    def _join_by(self) -> float | None:
        caps = []
        if self.signals.at is not None:
            caps.append(self.signals.at + SIGNAL_JOIN_S)
        if self.watchdog is not None and self.watchdog.stall is not None:
            caps.append(self.watchdog.stall.at + STALL_JOIN_S)
        return min(caps) if caps else None

    def _conclude(self, result: PipelineResult, group: ReplicaGroup) -> RunOutcome:
        stall = self.watchdog.stall if self.watchdog is not None else None
        if stall is not None and not any(f.at < stall.at for f in result.failures):
            return self._stalled(result, stall)
        if result.alive and self.signals.requested and not result.failures:
            return self._stopped_with_threads_alive(result)
        # A thread still alive may hold a device that no longer answers: do not read its state.
        state = group.state() if not result.alive else {}
        if result.failures or result.alive:
            self._failed()
        if result.failures:
            wrong = next((f for f in result.failures if isinstance(f.exc, WrongResult)), None)
            if wrong is not None and result.failures[0] is wrong:
                return RunOutcome(exit_code=3, pipeline=result, wrong_result=str(wrong.exc), state=state)
            return RunOutcome(exit_code=1, pipeline=result, state=state)
        if result.alive:
            return RunOutcome(exit_code=1, pipeline=result, state=state)
        with self.timeline.phase("checkpoint"):
            path = self._save(group.step)
        if self.signals.requested:
            return RunOutcome(exit_code=self.signals.exit_code, pipeline=result, checkpoint=path, state=state)
        final = self._finish(group)
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

    def _stalled(self, result: PipelineResult, stall: Stall) -> RunOutcome:
        self._failed(
            {
                "stalled": {
                    "step": stall.step,
                    "waited_s": round(stall.waited_s, 1),
                    "dump": stall.dump_path,
                    "dump_method": stall.dump_method,
                    "threads": {t.name: t.where for t in stall.threads if t.name.startswith("dflash-")},
                    "compiling": [t.name for t in stall.threads if t.compiling and not t.waiting],
                }
            }
        )
        return RunOutcome(exit_code=EXIT_STALLED, pipeline=result, stall=stall)

    def _stopped_with_threads_alive(self, result: PipelineResult) -> RunOutcome:
        """A signal, and a thread that did not stop by SIGNAL_JOIN_S: checkpoint if that can be
        done by SIGNAL_SAVE_S without the stuck thread, exit with the signal's code anyway."""
        assert self.signals.at is not None
        path, why = self._save_by(self.signals.at + SIGNAL_SAVE_S)
        return RunOutcome(exit_code=self.signals.exit_code, pipeline=result, checkpoint=path, detail=why)

    def _save_by(self, deadline: float) -> tuple[str | None, str | None]:
        """Checkpoint from a helper thread, waited for until `deadline` (time.monotonic()): a save
        that cannot finish (a device that no longer answers) must not keep the process alive;
        saves are atomic (tmp + rename), so one abandoned midway leaves the previous one intact."""
        box: dict[str, object] = {}

        def body() -> None:
            try:
                got = self.group.state_when_idle(deadline - time.monotonic())
                if got is None:
                    box["why"] = "the replica leader is stuck inside an optimizer update"
                    return
                box["path"] = self._save(*got)
            except Exception as e:  # noqa: BLE001  reported; the run is ending either way
                box["why"] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=body, name="dflash-checkpoint", daemon=True)
        t.start()
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            return None, "the write did not finish within the shutdown deadline"
        return box.get("path"), box.get("why")  # type: ignore[return-value]

    def _failed(self, extra: dict | None = None) -> None:
        """A failed run's last event: the GPU memory it held by then. Packing trials onto a GPU is
        planned from stored peaks (harness.campaign.planning.memory_peaks), and the campaign's failing
        gpu-bound cells never finish, so without this they leave no figure."""
        try:
            peak = self.plan.peak_reserved_gib()
        except Exception:  # noqa: BLE001  after a sticky CUDA error every CUDA call raises: no figure
            peak = None
        self.metrics.emit(
            {
                "event": "failed",
                "gpu_mem_peak_gib": peak,
                "torch": torch.__version__,
                "device_plan": self.plan.describe(),
                "fixes": list(self.fs.names()),
                "phases": self.timeline.record(),
                **(extra or {}),
            }
        )

    def _finish(self, group: ReplicaGroup) -> dict:
        cfg, m = self.cfg, self.models
        first, last = _loss_window(self.metrics.losses)
        export_dir = None
        if cfg.train.export:
            export_dir = os.path.join(cfg.train.out_dir, "export")
            with self.timeline.phase("export"):
                export_hf(m.objectives[0].drafter, cfg, export_dir)
        cache = None
        if cfg.compile.cache_file:
            with self.timeline.phase("compile_cache_save"):
                cache = compile_cache.save(cfg.compile.cache_file)
        with self.timeline.phase("evaluation"):
            tau = self._tau()
        snap = self.metrics.snapshot()
        return {
            "event": "final",
            "tokens_per_s": snap["tokens_per_s"],
            "tokens_per_s_steady": snap["tokens_per_s_steady"],
            "loss_first": first,
            "loss_last": last,
            "tau": tau,
            "steps": group.step,
            "steps_this_run": len(self.metrics.losses),
            "position_accuracy": self.metrics.position_accuracy(),
            "busy": snap["busy"],
            "elapsed_s": snap["elapsed_s"],
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


def heldout_prompts(ds: TokenDataset, limit: int) -> list[list[int]]:
    """Prompt part (tokens before the first supervised one) of up to `limit` held-out rows."""
    # prepare and the synthetic corpus pack only samples with a supervised token, so in their
    # packed rows this prompt lies inside the first document.
    prompts = []
    for i in range(len(ds)):
        ids, mask = ds.row(i)
        sup = np.flatnonzero(mask != 0)
        cut = int(sup[0]) if sup.size else len(ids)
        if cut > 0:
            prompts.append([int(t) for t in ids[:cut]])
        if len(prompts) == limit:
            break
    return prompts


def target_dims(cfg: RunConfig) -> tuple[int, int, int]:
    """(hidden_size, num_layers, vocab_size) of the configured target, without loading weights."""
    if cfg.target.path is None:
        return cfg.target.hidden_size, cfg.target.num_layers, cfg.target.vocab_size
    # transformers takes seconds to import: a synthetic target does without it
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(cfg.target.path, local_files_only=True)
    hf = getattr(hf, "text_config", hf)
    return hf.hidden_size, hf.num_hidden_layers, hf.vocab_size


def build_export_drafter(cfg: RunConfig, state: dict) -> DFlashDrafter:
    """A CPU drafter with the checkpointed weights (for `python -m dflash export`)."""
    hidden, layers, vocab = target_dims(cfg)
    drafter = DFlashDrafter(
        cfg.drafter,
        hidden_size=hidden,
        num_target_layers=layers,
        vocab_size=vocab,
        layer_ids=resolve_layer_ids(cfg.drafter, layers),
    )
    drafter.load_state_dict(state)
    return drafter


def _bind(fn, arg):
    return lambda: fn(arg)


def train(
    cfg: RunConfig, *, out: TextIO | None = None, err: TextIO | None = None, handle_signals: bool = False
) -> RunOutcome:
    """Run one training job (see the module docstring for the error contract)."""
    return Trainer(cfg, out=out, err=err, handle_signals=handle_signals).run()
