"""Checkpoints: atomic layout, and bit-exact resume (2n steps == n steps + resume n steps)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from small_run import small_config

from dflash import checkpoint
from dflash.train import train

N = 3


def _with_train(cfg, **kw):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **kw))


def test_resume_is_bit_exact(tmp_path):
    full = train(small_config(tmp_path / "full", steps=2 * N))
    assert full.exit_code == 0, full.pipeline.report()

    part_cfg = small_config(tmp_path / "part", steps=2 * N)
    first = train(_with_train(part_cfg, stop_at_step=N))
    assert first.exit_code == 0, first.pipeline.report()
    assert first.final["steps"] == N
    meta = json.loads(open(os.path.join(first.checkpoint, checkpoint.META_FILE)).read())
    assert meta["step"] == N and meta["data_seq"] == N * part_cfg.pipeline.num_drafter_threads

    second = train(_with_train(part_cfg, resume=True))
    assert second.exit_code == 0, second.pipeline.report()
    assert second.final["steps"] == 2 * N and second.final["steps_this_run"] == N
    changed = 0
    for name, value in full.state["drafter"].items():
        assert torch.equal(second.state["drafter"][name], value), f"{name} differs after resume"
        changed += int(not torch.equal(first.state["drafter"][name], value))
    assert changed, "the resumed half changed nothing: the comparison proves nothing"


def test_resume_without_checkpoint_starts_at_step_zero(tmp_path, capsys):
    out = train(small_config(tmp_path / "fresh", steps=2, resume=True))
    assert out.exit_code == 0
    assert out.final["steps"] == 2
    assert "no checkpoint" in capsys.readouterr().err


def _ckpt(step: int) -> checkpoint.Checkpoint:
    return checkpoint.Checkpoint(
        step=step,
        data_seq=2 * step,
        config={"preset": "x"},
        drafter={"w": torch.full((2,), float(step))},
        optimizer={"state": {}, "param_groups": []},
        scheduler={"last_epoch": step},
    )


def test_save_is_atomic_and_keeps_the_newest(tmp_path):
    for step in (1, 2, 3):
        checkpoint.save(str(tmp_path), _ckpt(step))
    root = tmp_path / "checkpoints"
    names = sorted(os.listdir(root))
    assert names == ["LATEST", "step-0000002", "step-0000003"]
    # A crash mid-save leaves only a temp folder: it is never picked up.
    os.makedirs(root / ".tmp-step-0000004-999")
    loaded = checkpoint.load(str(tmp_path))
    assert loaded.step == 3 and loaded.data_seq == 6
    assert torch.equal(loaded.drafter["w"], torch.full((2,), 3.0))
    assert checkpoint.load(str(root / "step-0000002")).step == 2


def test_missing_or_corrupt_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        checkpoint.load(str(tmp_path))
    path = checkpoint.save(str(tmp_path), _ckpt(1))
    with open(os.path.join(path, checkpoint.STATE_FILE), "wb") as f:
        f.write(b"garbage")
    with pytest.raises(checkpoint.CheckpointError, match="unreadable checkpoint"):
        checkpoint.load(str(tmp_path))


def test_resume_with_another_replica_count_is_bad_input(tmp_path):
    from harness.runtime.errors import ConfigError

    cfg = small_config(tmp_path / "run", steps=4)
    assert train(_with_train(cfg, stop_at_step=2)).exit_code == 0
    other = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, num_drafter_threads=1))
    with pytest.raises(ConfigError, match="num_drafter_threads"):
        train(_with_train(other, resume=True))
