"""The seed trainer's thread and device plans as `--set` overrides, for a number of GPUs.

`seed_topology(N)` (N >= 4): 5 target threads on the first N - 3 GPUs and 3 drafter threads on one
GPU each (the last three), so that no drafter shares its GPU with a target or another drafter.
`paired_topology(N)` (N >= 2): one target and one drafter thread per GPU, for hosts with fewer
than 4 GPUs: no two drafters (no two CUDA-graph captures) share a device, each drafter still has
an eager target thread beside it. Both set `devices.remap`, so the same overrides run on fewer
GPUs (everything doubles up), which is how CPU tests and one GPU check them.
"""

from __future__ import annotations

from dflash.trainer_errors import DevicePlanError


def seed_topology(num_gpus: int) -> tuple[str, ...]:
    if num_gpus < 4:
        raise DevicePlanError(f"the seed topology needs >= 4 GPUs (3 drafters + targets), got {num_gpus}")
    targets = ",".join(f"cuda:{i}" for i in range(num_gpus - 3))
    drafters = ",".join(f"cuda:{i}" for i in range(num_gpus - 3, num_gpus))
    return (
        "pipeline.num_target_threads=5",
        "pipeline.num_drafter_threads=3",
        f"devices.target_devices={targets}",
        f"devices.drafter_devices={drafters}",
        "devices.remap=true",
    )


def paired_topology(num_gpus: int) -> tuple[str, ...]:
    if num_gpus < 2:
        raise DevicePlanError(f"a paired topology needs >= 2 GPUs, got {num_gpus}")
    devices = ",".join(f"cuda:{i}" for i in range(num_gpus))
    return (
        f"pipeline.num_target_threads={num_gpus}",
        f"pipeline.num_drafter_threads={num_gpus}",
        f"devices.target_devices={devices}",
        f"devices.drafter_devices={devices}",
        "devices.remap=true",
    )


def topology(num_gpus: int) -> tuple[str, ...]:
    """The seed topology on 4 GPUs or more, the paired one below."""
    return seed_topology(num_gpus) if num_gpus >= 4 else paired_topology(num_gpus)
