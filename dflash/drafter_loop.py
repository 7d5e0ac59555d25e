"""Drafter stage: M threads `dflash-train-m` train one drafter as synchronous replicas.

Thread m: compile its own step (graph-isolation: on its own code object), optionally warm it up
on every batch shape it will see (thread-local-warmup: forward + backward, gradients discarded),
report ready at the startup gate, then loop: take batch `seq = step*M + m` from the ordered
receiver, forward + backward into replica m, and meet the other replicas at the step boundary
(replicas.ReplicaGroup). With sequential-startup the first compiled call of each thread (warm-up
or first step) runs one thread at a time in thread order. With persistent-buffers every batch
is copied into device buffers allocated once (collate already pads to one fixed shape). On the
steps train.oracle_every picks, the thread recomputes its batch eagerly before the barrier and
ends the run as a wrong result when the compiled step disagrees (dflash.oracle).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn

from dflash.anchors import sample_anchors
from dflash.channel import OrderedReceiver, StartupGate, Turns
from dflash.config import RunConfig
from dflash.devices import bind_thread
from dflash.heartbeat import beat
from dflash.metrics import Metrics
from dflash.oracle import Oracle
from dflash.replicas import ReplicaGroup
from dflash.step import StepInputs, compile_step, grad_step, make_inputs
from harness.runtime.failpoints import fault_point

STAGE = "drafter"
WARMUP_SEED = 0x5741524D


class PersistentInputs:
    """Device buffers per input shape; `fill` copies a batch in and returns the buffers."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, StepInputs] = {}

    def fill(self, inputs: StepInputs) -> StepInputs:
        key = tuple(tuple(t.shape) for t in inputs.as_args())
        buf = self._bufs.get(key)
        if buf is None:
            buf = StepInputs(*(torch.empty_like(t) for t in inputs.as_args()))
            self._bufs[key] = buf
        for dst, src in zip(buf.as_args(), inputs.as_args()):
            dst.copy_(src)
        return buf


def warmup_inputs(
    rows: int,
    length: int,
    *,
    cfg: RunConfig,
    vocab_size: int,
    context_dim: int,
    device: torch.device,
    dtype: torch.dtype,
    doc_ids: bool = False,
) -> StepInputs:
    """A synthetic full batch of one shape (random ids, every token supervised); with `doc_ids`,
    one document per row, so the step is warmed up with the inputs packed batches bring."""
    # Own generator: warm-up must not consume any RNG stream that training uses.
    g = torch.Generator(device="cpu").manual_seed(WARMUP_SEED + rows * 100_003 + length)
    input_ids = torch.randint(1, vocab_size - 1, (rows, length), generator=g)
    loss_mask = torch.ones(rows, length, dtype=torch.int64)
    lengths = torch.full((rows,), length, dtype=torch.int64)
    context = torch.randn(rows, length, context_dim, generator=g)
    anchors, keep = sample_anchors(loss_mask, lengths, cfg.drafter.num_anchors, cfg.drafter.block_size, g)
    return StepInputs(
        input_ids=input_ids.to(device),
        loss_mask=loss_mask.to(device),
        context=context.to(device=device, dtype=dtype),
        anchors=anchors.to(device),
        keep=keep.to(device),
        doc_ids=torch.zeros(rows, length, dtype=torch.int64, device=device) if doc_ids else None,
    )


class DrafterTrainLoop:
    def __init__(
        self,
        *,
        objectives: list[nn.Module],
        devices: tuple[torch.device, ...],
        receiver: OrderedReceiver,
        group: ReplicaGroup,
        gate: StartupGate,
        turns: Turns,
        cfg: RunConfig,
        fs,
        metrics: Metrics,
        warmup_shapes: list[tuple[int, int]],
        vocab_size: int,
        context_dim: int,
        oracle: Oracle | None = None,
        doc_ids: bool = False,
        timeline=None,
    ) -> None:
        self.objectives = objectives
        self.devices = devices
        self.receiver = receiver
        self.group = group
        self.gate = gate
        self.turns = turns
        self.cfg = cfg
        self.fs = fs
        self.metrics = metrics
        self.warmup_shapes = warmup_shapes
        self.vocab_size = vocab_size
        self.context_dim = context_dim
        self.oracle = oracle
        self.doc_ids = doc_ids
        """Whether batches carry document ids: the warm-up must compile the same signature."""
        self.timeline = timeline
        """dflash.timeline.Timeline: each thread's warm-up and first step, in seconds."""
        self._first_steps: set[int] = set()
        self._first_lock = threading.Lock()

    def _timed(self, m: int, what: str, since: float) -> None:
        if self.timeline is not None:
            self.timeline.thread(f"dflash-train-{m} {what}", time.monotonic() - since)

    def _first_step(self, m: int, running: bool) -> None:
        """Tell the timeline which threads are still in their first step (their compile, without a
        warm-up): the ticker's line names them all, not the last one that started."""
        if self.timeline is None:
            return
        with self._first_lock:
            (self._first_steps.add if running else self._first_steps.discard)(m)
            names = ", ".join(f"dflash-train-{k}" for k in sorted(self._first_steps))
        self.timeline.note(
            f"first step (compiles the step without a warm-up) in {names}"
            if names
            else "waiting for the first step's batches"
        )

    def _dtype(self, m: int) -> torch.dtype:
        return self.objectives[m].drafter.fc.weight.dtype

    @contextlib.contextmanager
    def _first_call(self, m: int, first: bool) -> Iterator[None]:
        """sequential-startup: the thread's first compiled call waits for its turn."""
        if not (first and self.fs.active("sequential-startup")):
            yield
            return
        self.turns.acquire(m)
        try:
            yield
        finally:
            self.fs.note("sequential-startup")
            self.turns.release(m)

    def _warmup(self, m: int, step_fn: Callable, buffers: PersistentInputs | None) -> None:
        replica = self.objectives[m].drafter
        for k, (rows, length) in enumerate(self.warmup_shapes):
            if self.timeline is not None:
                self.timeline.note(
                    f"dflash-train-{m}: warming up shape {k + 1} of {len(self.warmup_shapes)} ({rows}x{length})"
                )
            inputs = warmup_inputs(
                rows,
                length,
                cfg=self.cfg,
                vocab_size=self.vocab_size,
                context_dim=self.context_dim,
                device=self.devices[m],
                dtype=self._dtype(m),
                doc_ids=self.doc_ids,
            )
            if buffers is not None:
                inputs = buffers.fill(inputs)
            grad_step(step_fn, replica, inputs, self.fs, cudagraphs=self.cfg.compile.cudagraphs)
            beat()  # one compile per shape can take long: show progress to the harness
        replica.zero_grad(set_to_none=True)  # warm-up gradients are discarded
        self.fs.note("thread-local-warmup")

    def _train_one(self, m: int, step_fn: Callable, step: int, first: bool, buffers: PersistentInputs | None):
        seq = self.group.seq_for(m, step)
        hb = self.receiver.get(seq)
        fault_point("drafter.after_get")
        beat()
        with self.metrics.busy(STAGE):
            inputs = make_inputs(
                hb, self.cfg.drafter, seed=self.cfg.train.seed, device=self.devices[m], dtype=self._dtype(m)
            )
            if buffers is not None:
                inputs = buffers.fill(inputs)
                self.fs.note("persistent-buffers")
            with self._first_call(m, first):
                result = grad_step(
                    step_fn,
                    self.objectives[m].drafter,
                    inputs,
                    self.fs,
                    seq=seq,
                    tokens=hb.tokens.num_tokens,
                    cudagraphs=self.cfg.compile.cudagraphs,
                )
            if self.oracle is not None and self.oracle.due(step):
                # Here, not in the leader: this thread's replica and inputs, before the barrier
                # that precedes the update (dflash.oracle.Oracle.check says why that is safe).
                self.oracle.check(self.objectives[m], inputs, result, step)
            return result

    def run(self, m: int) -> None:
        """Body of thread dflash-train-m."""
        t = time.monotonic()
        bind_thread(self.devices[m])
        self.fs.on_device(self.devices[m])
        step_fn = compile_step(self.objectives[m], self.cfg.compile, self.fs)
        buffers = PersistentInputs() if self.fs.active("persistent-buffers") else None
        first = True
        if self.fs.active("thread-local-warmup"):
            with self._first_call(m, first):
                self._warmup(m, step_fn, buffers)
            first = False
        self._timed(m, "warmup", t)
        self.gate.ready()
        self.gate.wait()
        step = start = self.group.step
        while not self.group.done:
            t = time.monotonic()
            if step == start:
                self._first_step(m, True)
            result = self._train_one(m, step_fn, step, first, buffers)
            if step == start:
                # without a warm-up this is the thread's compile (and its wait for a batch)
                self._timed(m, "first step", t)
                self._first_step(m, False)
            first = False
            fault_point("drafter.before_step")
            more = self.group.sync(m, result)
            fault_point("drafter.after_step")
            beat()
            step += 1
            if not more:
                break
