"""Device plan: which device each target thread and each drafter thread runs on.

Threads take the configured device lists round-robin (`dflash-target-n` -> target_devices[n %
len]). Validation happens before anything is built or written, so a bad plan is a one-line
`DevicePlanError` (exit 2): an unknown device string, cuda without CUDA, or an index at or
beyond `torch.cuda.device_count()`. With `remap`, cuda:i becomes cuda:(i % device_count) so an
8-GPU plan can be exercised on fewer GPUs (threads then share devices).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dflash.config import DeviceConfig
from dflash.trainer_errors import DevicePlanError

SUPPORTED_TYPES = ("cpu", "cuda")


@dataclass(kw_only=True, slots=True, frozen=True)
class DevicePlan:
    target: tuple[torch.device, ...]
    """Device of target thread n."""
    drafter: tuple[torch.device, ...]
    """Device of drafter thread (replica) m."""

    def target_devices(self) -> list[torch.device]:
        """Distinct target devices in first-use order (one target model each)."""
        return list(dict.fromkeys(self.target))

    def drafter_devices(self) -> list[torch.device]:
        """Distinct drafter devices in first-use order (one frozen embed/LM-head copy each)."""
        return list(dict.fromkeys(self.drafter))

    def describe(self) -> dict:
        return {
            "target": [str(d) for d in self.target],
            "drafter": [str(d) for d in self.drafter],
        }

    def cuda_devices(self) -> list[torch.device]:
        return [d for d in dict.fromkeys((*self.target, *self.drafter)) if d.type == "cuda"]

    def peak_reserved_gib(self) -> dict[str, float] | None:
        """The most memory the caching allocator held on each CUDA device of the plan, GiB
        (`torch.cuda.max_memory_reserved`, cudagraph pools included); None without CUDA devices.
        How many trials fit on one GPU is read from this: the out-of-memory messages only show
        the other processes at the moment one of them failed (harness.campaign.matrix.presets.CAMPAIGN_GPU_SLOTS)."""
        cuda = [d for d in dict.fromkeys((*self.target, *self.drafter)) if d.type == "cuda"]
        if not cuda:
            return None
        return {str(d): round(torch.cuda.max_memory_reserved(d) / 2**30, 2) for d in cuda}


def parse_device(text: str, *, remap: bool, cuda_count: int) -> torch.device:
    """One validated device; raises DevicePlanError naming the bad entry."""
    try:
        dev = torch.device(text.strip())
    except (RuntimeError, ValueError, TypeError):
        raise DevicePlanError(f"unknown device string {text!r} (expected cpu or cuda:N)") from None
    if dev.type not in SUPPORTED_TYPES:
        raise DevicePlanError(f"unsupported device {text!r} (expected cpu or cuda:N)")
    if dev.type == "cpu":
        return torch.device("cpu")
    if cuda_count == 0:
        raise DevicePlanError(f"device {text!r} requested but CUDA is not available")
    index = 0 if dev.index is None else dev.index
    if index >= cuda_count:
        if not remap:
            raise DevicePlanError(
                f"device {text!r}: index {index} >= device count {cuda_count} "
                "(set devices.remap=true to map it onto the available GPUs)"
            )
        index %= cuda_count
    return torch.device("cuda", index)


def resolve(
    cfg: DeviceConfig, *, num_target_threads: int, num_drafter_threads: int, cuda_count: int | None = None
) -> DevicePlan:
    """Assign devices round-robin; `cuda_count` overrides torch.cuda.device_count() (tests)."""
    if cuda_count is None:
        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not cfg.target_devices or not cfg.drafter_devices:
        raise DevicePlanError("devices.target_devices and devices.drafter_devices must be non-empty")
    targets = [parse_device(d, remap=cfg.remap, cuda_count=cuda_count) for d in cfg.target_devices]
    drafters = [parse_device(d, remap=cfg.remap, cuda_count=cuda_count) for d in cfg.drafter_devices]
    return DevicePlan(
        target=tuple(targets[n % len(targets)] for n in range(num_target_threads)),
        drafter=tuple(drafters[m % len(drafters)] for m in range(num_drafter_threads)),
    )


def bind_thread(device: torch.device) -> None:
    """Make `device` this thread's current CUDA device (thread-local in the CUDA runtime), so
    tensors created without a device, Inductor kernels and cudagraph trees use the right GPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def synchronize(device: torch.device, stream_only: bool = False) -> None:
    """Wait for queued work on `device` (no-op on CPU); with `stream_only`, for this thread's
    current stream on it only.

    A device-wide synchronize while another thread captures a CUDA graph on the device fails with
    `operation not permitted when stream is capturing`, whatever the capture's mode (NVIDIA/
    TensorRT#2888; cudagraph trees capture with "thread_local", PR #107407). The current stream is
    never the capture stream (a pool stream, non-blocking), so waiting on it only is legal
    (the `stream-sync` fix, repro r23)."""
    if device.type != "cuda":
        return
    if stream_only:
        torch.cuda.current_stream(device).synchronize()
    else:
        torch.cuda.synchronize(device)
