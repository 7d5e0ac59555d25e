"""How a run ended: the `RunOutcome` the CLI maps to an exit code, and the last record a run
emits (`final` after a clean run, `failed` after a failure or a stall)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dflash.devices import DevicePlan
from dflash.metrics import Metrics
from dflash.pipeline import PipelineResult
from dflash.watchdog import Stall
from harness.runtime.fixes import FixSet


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


def loss_window(losses: list[float]) -> tuple[float | None, float | None]:
    """Mean loss over the first and the last 10% of steps (at least one step each)."""
    if not losses:
        return None, None
    k = max(1, len(losses) // 10)
    return sum(losses[:k]) / k, sum(losses[-k:]) / k


def failed_record(plan: DevicePlan, fs: FixSet, phases: dict, extra: dict | None = None) -> dict:
    """A failed run's last event: the GPU memory it held by then. Packing trials onto a GPU is
    planned from stored peaks (harness.campaign.matrix.planning.memory_peaks), and the campaign's failing
    gpu-bound cells never finish, so without this they leave no figure."""
    try:
        peak = plan.peak_reserved_gib()
    except Exception:  # noqa: BLE001  after a sticky CUDA error every CUDA call raises: no figure
        peak = None
    return {
        "event": "failed",
        "gpu_mem_peak_gib": peak,
        "torch": torch.__version__,
        "device_plan": plan.describe(),
        "fixes": list(fs.names()),
        "phases": phases,
        **(extra or {}),
    }


def stall_record(stall: Stall) -> dict:
    """The `stalled` part of a stalled run's failed record: where each stage thread was."""
    return {
        "stalled": {
            "step": stall.step,
            "waited_s": round(stall.waited_s, 1),
            "dump": stall.dump_path,
            "dump_method": stall.dump_method,
            "threads": {t.name: t.where for t in stall.threads if t.name.startswith("dflash-")},
            "compiling": [t.name for t in stall.threads if t.compiling and not t.waiting],
        }
    }


def training_record(metrics: Metrics, steps: int, tau: float | None) -> dict:
    """The final record's figures of the training itself."""
    first, last = loss_window(metrics.losses)
    snap = metrics.snapshot()
    return {
        "event": "final",
        "tokens_per_s": snap["tokens_per_s"],
        "tokens_per_s_steady": snap["tokens_per_s_steady"],
        "loss_first": first,
        "loss_last": last,
        "tau": tau,
        "steps": steps,
        "steps_this_run": len(metrics.losses),
        "position_accuracy": metrics.position_accuracy(),
        "busy": snap["busy"],
        "elapsed_s": snap["elapsed_s"],
    }
