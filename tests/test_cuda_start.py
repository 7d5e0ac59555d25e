"""dflash.cuda_start: the devices' first use beside the target's build, and its place in the trainer."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from dflash import cuda_start
from dflash.config import TrainConfig
from dflash.cuda_start import CudaStart, first_use
from dflash.devices import DevicePlan
from dflash.presets import tiny_cpu
from dflash.target import embedded_shape
from dflash.train import Trainer
from harness.runtime.errors import ConfigError

SHAPE = embedded_shape(tiny_cpu().target)
CPU = torch.device("cpu")


def test_the_first_use_draws_no_random_number():
    before = torch.random.get_rng_state()
    first_use(CPU, SHAPE, torch.bfloat16)
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.cuda
def test_the_first_use_leaves_cudas_generator_as_it_was():
    dev = torch.device("cuda:0")
    before = torch.cuda.get_rng_state(dev)
    first_use(dev, SHAPE, torch.bfloat16)
    assert torch.equal(before, torch.cuda.get_rng_state(dev))


def test_it_runs_in_a_named_thread_and_marks_when_it_is_done(monkeypatch):
    seen = []
    monkeypatch.setattr(cuda_start, "first_use", lambda d, *a, **k: seen.append((d, threading.current_thread().name)))
    start = CudaStart([CPU, CPU], SHAPE, torch.float32).start()
    start.join()
    assert seen == [(CPU, "dflash-cuda-start")] * 2
    assert start.done_at is not None


def test_its_error_is_raised_in_the_thread_that_joins(monkeypatch):
    def broken(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(cuda_start, "first_use", broken)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="out of memory"):
        CudaStart([CPU], SHAPE, torch.float32).start().join()


def test_a_first_use_past_its_deadline_is_named(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(cuda_start, "first_use", lambda *a, **k: release.wait(10))
    start = CudaStart([CPU], SHAPE, torch.float32).start()
    try:
        with pytest.raises(RuntimeError, match="did not finish within 0 s"):
            start.join(0.05)
    finally:
        release.set()
        start.join()


def _trainer_with_cuda_stand_in(monkeypatch, first_use_body) -> Trainer:
    """A tiny-cpu trainer whose plan reports its CPU device as the one to start."""
    cfg = dataclasses.replace(tiny_cpu(), train=TrainConfig(steps=1, out_dir="unused"))
    trainer = Trainer(cfg)
    monkeypatch.setattr(DevicePlan, "cuda_devices", lambda self: [CPU])
    monkeypatch.setattr(cuda_start, "first_use", first_use_body)
    return trainer


def test_the_trainer_waits_for_it_after_the_targets_build(monkeypatch):
    order = []
    trainer = _trainer_with_cuda_stand_in(monkeypatch, lambda *a, **k: order.append("first use"))
    with trainer._cuda_started():
        threading.Event().wait(0.05)
        order.append("body")
    assert sorted(order) == ["body", "first use"]
    rec = trainer.timeline.record()
    assert "device_init" in rec and rec["cuda_ready_at"] <= rec["total"]


def test_a_failing_build_reports_its_own_error_not_the_first_uses(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("CUDA error: device not ready")

    trainer = _trainer_with_cuda_stand_in(monkeypatch, broken)
    with pytest.raises(ConfigError, match="bad target"), trainer._cuda_started():
        raise ConfigError("bad target")
    assert not any(t.name == "dflash-cuda-start" for t in threading.enumerate())


def test_a_cpu_plan_starts_no_thread(monkeypatch):
    monkeypatch.setattr(cuda_start.CudaStart, "start", lambda self: pytest.fail("started on a CPU plan"))
    trainer = Trainer(tiny_cpu())
    with trainer._cuda_started():
        pass
    assert "device_init" not in trainer.timeline.record()


@pytest.mark.parametrize("cudnn", [False, True])
def test_the_trainer_sets_cudnns_attention_before_the_first_use(monkeypatch, cudnn):
    seen = []
    trainer = _trainer_with_cuda_stand_in(
        monkeypatch, lambda *a, **k: seen.append(torch.backends.cuda.cudnn_sdp_enabled())
    )
    trainer.cfg = dataclasses.replace(
        trainer.cfg, target=dataclasses.replace(trainer.cfg.target, cudnn_attention=cudnn)
    )
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        with trainer._cuda_started():
            pass
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    assert seen == [cudnn]


def test_a_cpu_plan_leaves_cudnns_attention_as_it_was(monkeypatch):
    before = torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", lambda on: pytest.fail("set on a CPU plan"))
    with Trainer(tiny_cpu())._cuda_started():
        pass
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_the_first_use_probe_runs_each_operation_it_names():
    # tools/first_use_jit times them on CUDA; here each must at least run
    from tools.first_use_jit import operations

    ops = operations(CPU)
    assert {"sdpa causal bf16 flash", "sdpa causal bf16 any", "adamw step"} <= set(ops)
    for fn in ops.values():
        fn()
