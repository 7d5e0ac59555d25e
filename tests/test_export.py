"""z-lab layout export: config fields, weight round trip, atomic replacement."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import dflash.export as export
from dflash.config import DrafterConfig, RunConfig
from dflash.drafter import DFlashDrafter
from harness.runtime.errors import UserInputError


def _run_cfg(**drafter_kw) -> RunConfig:
    return RunConfig(drafter=DrafterConfig(num_layers=2, block_size=4, **drafter_kw))


def _drafter(cfg: RunConfig, seed: int = 0) -> DFlashDrafter:
    d = DFlashDrafter(cfg.drafter, hidden_size=64, num_target_layers=8, vocab_size=256, layer_ids=(1, 5))
    d.reset_parameters(seed)
    return d


def test_export_writes_the_zlab_config(tmp_path):
    cfg = _run_cfg()
    out = export.export_hf(_drafter(cfg), cfg, str(tmp_path / "draft"))
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert out == str(tmp_path / "draft")
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["block_size"] == 4 and config["num_target_layers"] == 8
    assert config["dflash_config"] == {"mask_token_id": 255, "target_layer_ids": [1, 5]}
    assert config["layer_types"] == ["full_attention"] * 2
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (64, 2, 16)
    assert config["vocab_size"] == 256


def test_export_writes_layer_types_window_and_auto_map(tmp_path):
    cfg = _run_cfg(layer_types=("sliding_attention", "full_attention"), sliding_window=16)
    drafter = _drafter(cfg)
    export.export_hf(drafter, cfg, str(tmp_path / "d"))
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    assert config["sliding_window"] == 16 and config["use_sliding_window"] is True
    assert config["auto_map"] == {
        "AutoConfig": "modeling_dflash.DFlashConfig",
        "AutoModel": "modeling_dflash.DFlashDraftModel",
    }
    shipped = (tmp_path / "d" / "modeling_dflash.py").read_text()
    assert shipped == Path(export.MODELING_SOURCE).read_text()
    rebuilt = export.drafter_from_hf(str(tmp_path / "d"))
    assert rebuilt.layer_types == drafter.layer_types and rebuilt.sliding_window == 16
    x, ctx, pos = torch.randn(1, 4, 64), torch.randn(1, 20, 128), torch.arange(24)[None]
    with torch.no_grad():
        assert torch.equal(rebuilt(x, ctx, pos), drafter(x, ctx, pos))
    full = json.loads(json.dumps(export.hf_config(_drafter(_run_cfg()), block_size=4, mask_token_id=3)))
    assert full["sliding_window"] is None and full["use_sliding_window"] is False


def test_weights_round_trip_without_embedding_or_head(tmp_path):
    cfg = _run_cfg(mask_token_id=7)
    drafter = _drafter(cfg, seed=3)
    export.export_hf(drafter, cfg, str(tmp_path / "d"))
    config, state = export.load_hf(str(tmp_path / "d"))
    assert config["dflash_config"]["mask_token_id"] == 7
    ref = drafter.state_dict()
    assert set(state) == set(ref)
    assert not any("embed" in k or "lm_head" in k for k in state)
    assert all(torch.equal(state[k], ref[k]) for k in ref)
    rebuilt = export.drafter_from_hf(str(tmp_path / "d"))
    x, ctx = torch.randn(1, 4, 64), torch.randn(1, 6, 128)
    pos = torch.arange(10)[None]
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x, ctx, pos), drafter(x, ctx, pos))


def test_export_replaces_an_existing_export(tmp_path):
    cfg = _run_cfg()
    out = str(tmp_path / "d")
    export.export_hf(_drafter(cfg, seed=1), cfg, out)
    second = _drafter(cfg, seed=2)
    export.export_hf(second, cfg, out)
    _, state = export.load_hf(out)
    assert torch.equal(state["fc.weight"], second.state_dict()["fc.weight"])
    assert sorted(os.listdir(tmp_path)) == ["d"]  # no temp or old directories left


def test_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    cfg = _run_cfg()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export, "_write_dir", boom)
    with pytest.raises(OSError):
        export.export_hf(_drafter(cfg), cfg, str(tmp_path / "d"))
    assert os.listdir(tmp_path) == []


def test_bad_paths_are_user_errors(tmp_path):
    cfg = _run_cfg()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError):
        export.export_hf(_drafter(cfg), cfg, str(tmp_path / "file"))
    with pytest.raises(UserInputError):
        export.load_hf(str(tmp_path))
    export.export_hf(_drafter(cfg), cfg, str(tmp_path / "d"))
    (tmp_path / "d" / "model.safetensors").write_bytes(b"\x08\x00truncated")
    with pytest.raises(UserInputError, match="model.safetensors|unreadable"):
        export.load_hf(str(tmp_path / "d"))
