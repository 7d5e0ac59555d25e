"""Device plans: round-robin assignment, validation errors, remap onto fewer GPUs."""

from __future__ import annotations

import pytest
import torch

from dflash import presets
from dflash.config import DeviceConfig
from dflash.devices import resolve
from dflash.trainer_errors import DevicePlanError


def test_threads_take_devices_round_robin():
    cfg = DeviceConfig(target_devices=("cuda:0", "cuda:1"), drafter_devices=("cuda:2",))
    plan = resolve(cfg, num_target_threads=5, num_drafter_threads=2, cuda_count=4)
    assert [str(d) for d in plan.target] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert [str(d) for d in plan.drafter] == ["cuda:2", "cuda:2"]
    assert plan.target_devices() == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert plan.describe()["drafter"] == ["cuda:2", "cuda:2"]


def test_cpu_plan_is_valid_without_cuda():
    plan = resolve(DeviceConfig(), num_target_threads=2, num_drafter_threads=3, cuda_count=0)
    assert set(plan.target) | set(plan.drafter) == {torch.device("cpu")}


@pytest.mark.parametrize(
    "devices,count,match",
    [
        (("cuda:0",), 0, "CUDA is not available"),
        (("cuda:4",), 2, "index 4 >= device count 2"),
        (("tpu:0",), 1, "unknown device string|unsupported device"),
        (("banana",), 1, "unknown device string"),
        (("mps",), 1, "unsupported device"),
        ((), 1, "must be non-empty"),
    ],
)
def test_invalid_plans_raise_one_clear_error(devices, count, match):
    cfg = DeviceConfig(target_devices=devices, drafter_devices=("cpu",))
    with pytest.raises(DevicePlanError, match=match):
        resolve(cfg, num_target_threads=1, num_drafter_threads=1, cuda_count=count)


def test_remap_folds_a_multi_gpu_plan_onto_fewer_gpus():
    cfg = presets.gpu_multi().devices
    assert cfg.remap
    plan = resolve(cfg, num_target_threads=5, num_drafter_threads=3, cuda_count=2)
    assert [d.index for d in plan.target] == [0, 1, 0, 1, 0]
    assert [d.index for d in plan.drafter] == [1, 0, 1]
    with pytest.raises(DevicePlanError):
        resolve(
            DeviceConfig(target_devices=cfg.target_devices, drafter_devices=("cpu",)),
            num_target_threads=5,
            num_drafter_threads=1,
            cuda_count=2,
        )


def test_bare_cuda_means_device_zero():
    plan = resolve(
        DeviceConfig(target_devices=("cuda",), drafter_devices=("cuda",)),
        num_target_threads=1,
        num_drafter_threads=1,
        cuda_count=1,
    )
    assert plan.target[0] == torch.device("cuda", 0)


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_preset_builds_a_valid_plan(name):
    cfg = presets.get(name)
    assert cfg.preset == name
    gpus = 8 if name.startswith("gpu") else 0
    plan = resolve(
        cfg.devices,
        num_target_threads=cfg.pipeline.num_target_threads,
        num_drafter_threads=cfg.pipeline.num_drafter_threads,
        cuda_count=gpus,
    )
    assert len(plan.target) == cfg.pipeline.num_target_threads
    assert cfg.data.synthetic_max_len <= cfg.data.bucket_boundaries[-1]
    if name == "gpu-multi":
        assert len(plan.target_devices()) == 5 and len(plan.drafter_devices()) == 3


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(Exception, match="known presets: tiny-cpu, cpu-compile, gpu-default"):
        presets.get("nope")


def test_peak_memory_is_read_once_per_cuda_device_of_the_plan(monkeypatch):
    cfg = DeviceConfig(target_devices=("cuda:0", "cuda:1"), drafter_devices=("cuda:1",))
    plan = resolve(cfg, num_target_threads=2, num_drafter_threads=3, cuda_count=2)
    asked = []
    monkeypatch.setattr(
        torch.cuda, "max_memory_reserved", lambda d: asked.append(str(d)) or (3 << 30) + (1 << 29) * d.index
    )
    assert plan.peak_reserved_gib() == {"cuda:0": 3.0, "cuda:1": 3.5}
    assert asked == ["cuda:0", "cuda:1"]
    cpu = resolve(DeviceConfig(), num_target_threads=1, num_drafter_threads=1, cuda_count=0)
    assert cpu.peak_reserved_gib() is None
