"""Synchronous drafter replicas: M threads train ONE drafter.

Thread m owns replica m (on its device) and computes gradients for batch `seq = step*M + m`.
At the step boundary every thread waits on a barrier; the leader (m = 0) sums the gradients in
seq order into replica 0, divides by M, clips, takes one AdamW step with a warmup+cosine
schedule, and copies the parameters back into every other replica *in place* (stable addresses,
so a CUDA-graph replay keeps reading the right memory); a second barrier releases everyone.

Property (tested): M threads give the same parameters as one thread that accumulates the same M
batches per step in seq order, because float addition happens in the same order (g_0 + g_1 + ...).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import torch
from torch import nn

from dflash.adamw import AdamW
from dflash.config import TrainConfig
from dflash.step import StepResult
from dflash.trainer_errors import StageStopped, WrongResult


def warmup_cosine(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """LR multiplier: linear warmup over ceil(ratio*total) steps, then cosine decay toward 0."""
    warmup = max(1, math.ceil(warmup_ratio * total_steps)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def build_optimizer(model: nn.Module, cfg: TrainConfig):
    # foreach=False: the per-parameter loop is the same code on CPU and CUDA, so a CPU test of
    # bit-exact resume exercises the path the GPU runs. dflash.adamw: no torch._dynamo import.
    opt = AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.steps, cfg.warmup_ratio))
    return opt, sched


def reduce_grads(replicas: list[nn.Module]) -> None:
    """Sum replica grads into replica 0 in replica (= seq) order, then divide by M."""
    lead = list(replicas[0].parameters())
    for other in replicas[1:]:
        for p0, pm in zip(lead, other.parameters(), strict=True):
            if pm.grad is None:
                continue
            g = pm.grad.to(p0.device)
            if p0.grad is None:
                p0.grad = g.clone()
            else:
                p0.grad.add_(g)
    if len(replicas) > 1:
        for p in lead:
            if p.grad is not None:
                p.grad.div_(len(replicas))


@torch.no_grad()
def broadcast_params(replicas: list[nn.Module]) -> None:
    """Copy replica 0's parameters into the others in place (addresses do not change)."""
    lead = list(replicas[0].parameters())
    for other in replicas[1:]:
        for p0, pm in zip(lead, other.parameters(), strict=True):
            pm.copy_(p0)


def apply_update(replicas: list[nn.Module], opt, sched, cfg: TrainConfig) -> None:
    """reduce -> clip -> AdamW step -> schedule step -> broadcast (the leader's whole job)."""
    reduce_grads(replicas)
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(replicas[0].parameters(), cfg.grad_clip)
    opt.step()
    sched.step()
    broadcast_params(replicas)


class ReplicaGroup:
    """The step-boundary protocol between M drafter threads; the leader is replica 0.

    `after_update(step, results)` runs on the leader between the barriers (metrics,
    checkpoints); `should_finish()` lets a signal end the run at a step boundary.
    """

    def __init__(
        self,
        replicas: list[nn.Module],
        cfg: TrainConfig,
        *,
        start_step: int = 0,
        after_update: Callable[[int, list[StepResult]], None] | None = None,
        should_finish: Callable[[], bool] | None = None,
    ) -> None:
        self.replicas = replicas
        self.cfg = cfg
        self.num_replicas = len(replicas)
        self.optimizer, self.scheduler = build_optimizer(replicas[0], cfg)
        self.step = start_step
        self.done = start_step >= cfg.steps
        self._results: list[StepResult | None] = [None] * self.num_replicas
        self._barrier = threading.Barrier(self.num_replicas)
        # Held by the leader while it changes parameters, optimizer state and `step` together: a
        # checkpoint taken while a thread is still alive (signal past the join deadline) must not
        # read them half-updated.
        self._update_lock = threading.Lock()
        self._after_update = after_update
        self._should_finish = should_finish or (lambda: False)

    def seq_for(self, replica: int, step: int) -> int:
        return step * self.num_replicas + replica

    def sync(self, replica: int, result: StepResult) -> bool:
        """Hand in this replica's step result; returns True while there are more steps."""
        self._results[replica] = result
        self._wait()
        if replica == 0:
            self._lead()
        self._wait()
        return not self.done

    def _lead(self) -> None:
        results = [r for r in self._results if r is not None]
        assert len(results) == self.num_replicas, "a replica reached the barrier without a result"
        loss = sum(float(r.loss) for r in results) / len(results)
        if self.cfg.nan_check and not math.isfinite(loss):
            raise WrongResult(f"non-finite loss {loss} at step {self.step + 1}")
        with self._update_lock:
            apply_update(self.replicas, self.optimizer, self.scheduler, self.cfg)
            self.step += 1
        self._results = [None] * self.num_replicas
        if self._after_update is not None:
            self._after_update(self.step, results)
        self.done = self.step >= self.cfg.steps or self._should_finish()

    def _wait(self) -> None:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise StageStopped("replica barrier aborted") from None

    def abort(self) -> None:
        """Wake every thread waiting at the barrier with StageStopped (pipeline stop)."""
        self._barrier.abort()

    def state(self) -> dict:
        return {
            "drafter": {k: v.detach().cpu().clone() for k, v in self.replicas[0].state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def state_when_idle(self, timeout_s: float) -> tuple[int, dict] | None:
        """(step, state) once no update is in progress, or None if one is still running after
        `timeout_s` (the leader is stuck inside it)."""
        if not self._update_lock.acquire(timeout=max(0.0, timeout_s)):
            return None
        try:
            return self.step, self.state()
        finally:
            self._update_lock.release()

    def load(self, drafter: dict, optimizer: dict, scheduler: dict) -> None:
        self.replicas[0].load_state_dict(drafter)
        broadcast_params(self.replicas)
        self.optimizer.load_state_dict(optimizer)
        self.scheduler.load_state_dict(scheduler)
