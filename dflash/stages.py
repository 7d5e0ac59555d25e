"""The pipeline's stages wired together: the bounded channels between them, the startup gate, the
replica group, and the prefetch, target-forward and drafter-train threads under one Supervisor.

`build_stages` builds every object and registers the threads without starting any;
`Supervisor.run` (dflash.pipeline) starts them, waits for the drafter threads and joins them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from dflash.channel import Channel, OrderedReceiver, StartupGate, Turns
from dflash.config import RunConfig
from dflash.data import TokenDataset
from dflash.devices import DevicePlan
from dflash.drafter_loop import DrafterTrainLoop
from dflash.metrics import Metrics
from dflash.models import Models
from dflash.oracle import Oracle
from dflash.pipeline import Supervisor
from dflash.prefetch import BatchPrefetcher, EpochPlanner
from dflash.replicas import ReplicaGroup
from dflash.target_loop import TargetForwardLoop
from dflash.timeline import Timeline
from harness.runtime.fixes import FixSet


@dataclass(kw_only=True, slots=True)
class StageInputs:
    """What the stages are built from: the checked config and what the trainer's prepare() read."""

    cfg: RunConfig
    plan: DevicePlan
    fs: FixSet
    models: Models
    train_ds: TokenDataset
    planner: EpochPlanner
    metrics: Metrics
    oracle: Oracle
    timeline: Timeline


@dataclass(kw_only=True, slots=True)
class Stages:
    stop: threading.Event
    gate: StartupGate
    supervisor: Supervisor


@dataclass(frozen=True, slots=True)
class _Links:
    tokens: Channel
    hidden: Channel
    receiver: OrderedReceiver
    gate: StartupGate
    pad_to: int | None
    pad_rows: int | None


def build_group(
    inp: StageInputs, start_step: int, after_update: Callable, should_finish: Callable[[], bool]
) -> ReplicaGroup:
    """The drafter replicas and their shared optimizer step (loaded from a checkpoint by the caller)."""
    return ReplicaGroup(
        [o.drafter for o in inp.models.objectives],
        inp.cfg.train,
        start_step=start_step,
        after_update=after_update,
        should_finish=should_finish,
    )


def build_stages(inp: StageInputs, group: ReplicaGroup, start_step: int) -> Stages:
    """Every stage object and its threads, registered on a Supervisor that has started none."""
    p = inp.cfg.pipeline
    stop = threading.Event()
    links = _links(inp, stop)
    prefetch = _prefetcher(inp, links, start_step)
    target = _target_loop(inp, links)
    drafter = _drafter_loop(inp, links, group, stop)
    sup = Supervisor(stop=stop, fs=inp.fs, shutdown_deadline_s=p.shutdown_deadline_s, poll_s=p.poll_s)
    sup.on_stop(group.abort)
    for k in range(p.num_prefetch_threads):
        sup.add(f"dflash-prefetch-{k}", "prefetch", _bind(prefetch.run, k))
    for n in range(p.num_target_threads):
        sup.add(f"dflash-target-{n}", "target", _bind(target.run, n))
    for r in range(p.num_drafter_threads):
        sup.add(f"dflash-train-{r}", "drafter", _bind(drafter.run, r), finisher=True)
    return Stages(stop=stop, gate=links.gate, supervisor=sup)


def _links(inp: StageInputs, stop: threading.Event) -> _Links:
    """The channels between the stages and the gate that opens once every drafter thread is ready."""
    p, metrics = inp.cfg.pipeline, inp.metrics
    tokens = Channel("tokens", p.queue_depth, stop, p.poll_s)
    hidden = Channel("hidden", p.queue_depth, stop, p.poll_s)
    receiver = OrderedReceiver(hidden, lambda hb: hb.tokens.seq, stop, p.poll_s)
    metrics.watch(lambda: {"tokens": tokens.depth(), "hidden": hidden.depth(), "reorder": receiver.buffered()})
    gate = StartupGate(
        p.num_drafter_threads, stop, timeout_s=p.startup_timeout_s, poll_s=p.poll_s, on_open=metrics.start
    )
    # persistent-buffers pads every batch to one shape, so the drafter reuses its input buffers.
    persistent = inp.fs.active("persistent-buffers")
    pad_to = inp.cfg.data.bucket_boundaries[-1] if persistent else None
    pad_rows = inp.planner.max_rows() if persistent else None
    return _Links(tokens, hidden, receiver, gate, pad_to, pad_rows)


def _prefetcher(inp: StageInputs, links: _Links, start_step: int) -> BatchPrefetcher:
    p = inp.cfg.pipeline
    return BatchPrefetcher(
        ds=inp.train_ds,
        planner=inp.planner,
        out=links.tokens,
        num_threads=p.num_prefetch_threads,
        start_seq=start_step * p.num_drafter_threads,
        end_seq=inp.cfg.train.steps * p.num_drafter_threads,
        gate=links.gate,
        metrics=inp.metrics,
        pad_to=links.pad_to,
        pad_rows=links.pad_rows,
    )


def _target_loop(inp: StageInputs, links: _Links) -> TargetForwardLoop:
    return TargetForwardLoop(
        targets=inp.models.targets,
        devices=inp.plan.target,
        layer_ids=inp.models.layer_ids,
        inp=links.tokens,
        out=links.hidden,
        ccfg=inp.cfg.compile,
        fs=inp.fs,
        metrics=inp.metrics,
    )


def _drafter_loop(inp: StageInputs, links: _Links, group: ReplicaGroup, stop: threading.Event) -> DrafterTrainLoop:
    p, m = inp.cfg.pipeline, inp.models
    return DrafterTrainLoop(
        objectives=m.objectives,
        devices=inp.plan.drafter,
        receiver=links.receiver,
        group=group,
        gate=links.gate,
        turns=Turns(p.num_drafter_threads, stop, p.poll_s),
        cfg=inp.cfg,
        fs=inp.fs,
        metrics=inp.metrics,
        warmup_shapes=inp.planner.shapes(links.pad_to, links.pad_rows),
        vocab_size=m.vocab_size,
        context_dim=m.context_dim,
        oracle=inp.oracle if inp.oracle.every else None,
        doc_ids=inp.train_ds.has_doc_ids,
        timeline=inp.timeline,
    )


def _bind(fn, arg):
    return lambda: fn(arg)
