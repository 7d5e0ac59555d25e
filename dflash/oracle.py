"""Differential oracle: a sampled drafter step recomputed eagerly and compared with the compiled one.

A non-finite loss is not the only wrong result a race can leave: a thread handed another thread's
CUDA-graph output, or a stale buffer, trains on finite numbers that are simply not its own. On
the steps `train.oracle_every` picks, each drafter thread recomputes its batch with the eager
`objective.forward` under no_grad, from the same parameters and inputs, after its own compiled
step and before the replica leader's update, and compares what the leader is about to use:

  loss     |compiled - eager| <= oracle_atol + oracle_rtol * |eager|
  counts   labels per block position (a function of the inputs alone): equal
  correct  greedy hits per block position (a function of every logit's argmax): at most
           oracle_flips predictions may differ in all, the near-ties that compiled kernels
           round the other way

A disagreement is a WrongResult (exit 3, `WRONG_RESULT: <why>`). The tolerances come from the
largest differences measured between compiled and eager steps on clean CPU runs
(docs/log/2026-12-02-loss-oracle.md).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import torch
from torch import nn

from dflash.config import TrainConfig
from dflash.loss import LossOut
from dflash.step import StepInputs, StepResult
from dflash.trainer_errors import WrongResult


@dataclass(kw_only=True, slots=True)
class Diff:
    """How one compiled step's result differs from its eager recomputation."""

    loss: float
    """The compiled loss (what the replica leader averages)."""
    eager: float
    """The eager loss from the same parameters and inputs."""
    flips: int
    """Greedy hits that differ, summed over block positions (|correct - eager correct|)."""
    counts_equal: bool

    @property
    def abs_diff(self) -> float:
        return abs(self.loss - self.eager)

    @property
    def rel_diff(self) -> float:
        return self.abs_diff / abs(self.eager) if self.eager else (0.0 if not self.loss else math.inf)

    def violation(self, cfg: TrainConfig) -> str | None:
        """Why the compiled result is wrong under cfg's tolerances, or None."""
        if math.isnan(self.loss) and math.isnan(self.eager):
            return None  # both NaN: the parameters are, which train.nan_check reports
        if not self.abs_diff <= cfg.oracle_atol + cfg.oracle_rtol * abs(self.eager):
            return (
                f"loss {self.loss:.7g} != eager {self.eager:.7g} (|diff| {self.abs_diff:.3g} > "
                f"{cfg.oracle_atol:g} + {cfg.oracle_rtol:g} * |eager|)"
            )
        if not self.counts_equal:
            return "label counts differ from eager (the step read other inputs)"
        if self.flips > cfg.oracle_flips:
            return f"{self.flips} greedy hits differ from eager (> {cfg.oracle_flips})"
        return None


@torch.no_grad()
def reference(objective: nn.Module, inputs: StepInputs) -> LossOut:
    """The eager objective on `inputs`, outside autograd: no graph, no .grad touched."""
    return objective(*inputs.as_args())


def compare(result: StepResult, ref: LossOut) -> Diff:
    return Diff(
        loss=float(result.loss),
        eager=float(ref.loss),
        flips=int((result.correct.float() - ref.correct.float()).abs().sum()),
        counts_equal=bool(torch.equal(result.counts.float(), ref.counts.float())),
    )


class Oracle:
    """The checks of one run: which steps, the tolerances, and the largest differences seen."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.every = cfg.oracle_every
        self._lock = threading.Lock()
        self.checked = 0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.max_flips = 0
        self.seconds = 0.0
        """Time spent in checks, all threads together (the oracle's own share of a run)."""

    def due(self, step: int) -> bool:
        """Steps 0, N, 2N, ... (0-based): the first step, where compiles land, is always checked."""
        return self.every > 0 and step % self.every == 0

    def check(self, objective: nn.Module, inputs: StepInputs, result: StepResult, step: int) -> None:
        """Recompute `result`'s step eagerly; WrongResult if the two disagree."""
        # Runs in the drafter thread that owns `objective`, between its compiled step and the
        # barrier: replica m's parameters change only in the leader's update, which waits for this
        # thread at the barrier, and its inputs are its own. The eager original runs no Dynamo
        # frame, no Inductor code and no CUDA-graph replay, so it shares none of the state the
        # races are in (the target threads run the same kind of eager work beside the compiled
        # drafter), and needs no fix's lock; no_grad leaves the real step's gradients alone.
        t0 = time.perf_counter()
        diff = compare(result, reference(objective, inputs))
        spent = time.perf_counter() - t0
        with self._lock:
            self.checked += 1
            self.seconds += spent
            if not math.isnan(diff.abs_diff):
                self.max_abs = max(self.max_abs, diff.abs_diff)
                self.max_rel = max(self.max_rel, diff.rel_diff)
            self.max_flips = max(self.max_flips, diff.flips)
        why = diff.violation(self.cfg)
        if why is not None:
            raise WrongResult(
                f"drafter step disagrees with its eager recomputation: {why} at step "
                f"{step + 1} (batch {result.seq}, {threading.current_thread().name})"
            )

    def summary(self) -> dict | None:
        """For the final event: steps checked and the largest differences (None when off)."""
        if not self.every:
            return None
        with self._lock:
            return {
                "every": self.every,
                "checked": self.checked,
                "seconds": round(self.seconds, 3),
                "max_abs": self.max_abs,
                "max_rel": self.max_rel,
                "max_flips": self.max_flips,
            }
