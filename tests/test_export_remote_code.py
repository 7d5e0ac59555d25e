"""An export loads through AutoModel(trust_remote_code=True) as the DFlash draft model and
computes what the trainer's drafter computes, with full and sliding-window layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, DynamicCache

from dflash import export
from dflash.config import DrafterConfig, RunConfig
from dflash.drafter import DFlashDrafter

LAYOUTS = {
    "full": (("full_attention", "full_attention"), None),
    "sliding": (("sliding_attention", "full_attention"), 5),
}


def _export(tmp_path, layout: str):
    layer_types, window = LAYOUTS[layout]
    cfg = RunConfig(
        drafter=DrafterConfig(
            num_layers=2, block_size=4, num_heads=4, num_kv_heads=2, layer_types=layer_types, sliding_window=window
        )
    )
    drafter = DFlashDrafter(cfg.drafter, hidden_size=64, num_target_layers=8, vocab_size=256, layer_ids=(1, 5))
    drafter.reset_parameters(7)
    # A folder name per test: transformers caches remote code by folder name and file hash.
    path = export.export_hf(drafter, cfg, str(tmp_path / f"dflash-{layout}-{tmp_path.name}"))
    return drafter.eval(), path


def _load(path):
    model, info = AutoModel.from_pretrained(path, trust_remote_code=True, output_loading_info=True)
    return model.eval(), info


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_automodel_builds_the_dflash_class_with_every_weight(tmp_path, layout):
    drafter, path = _export(tmp_path, layout)
    model, info = _load(path)
    assert type(model).__name__ == "DFlashDraftModel"
    assert "qwen3" not in type(model).__module__.lower() and type(model).__module__.endswith("modeling_dflash")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert info["mismatched_keys"] == set()
    assert set(model.state_dict()) == set(drafter.state_dict())
    assert model.target_layer_ids == [1, 5] and model.block_size == 4 and model.mask_token_id == 255
    assert model.layer_types == list(LAYOUTS[layout][0]) and model.config.sliding_window == LAYOUTS[layout][1]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_loaded_model_computes_the_drafters_forward_bit_for_bit(tmp_path, layout):
    drafter, path = _export(tmp_path, layout)
    model, _ = _load(path)
    g = torch.Generator().manual_seed(1)
    x, ctx = torch.randn(2, 4, 64, generator=g), torch.randn(2, 11, 128, generator=g)
    pos = torch.arange(15)[None].expand(2, -1)
    with torch.no_grad():
        ours = drafter(x, ctx, pos)
        theirs = model(position_ids=pos, noise_embedding=x, target_hidden=ctx)
    assert torch.equal(theirs, ours)


def test_a_cached_draft_round_sees_the_same_window_as_one_pass(tmp_path):
    # z-lab's generation loop: context rows enter the draft cache round by round, and the block's
    # own rows are cropped away after each round.
    _, path = _export(tmp_path, "sliding")
    model, _ = _load(path)
    g = torch.Generator().manual_seed(2)
    x1, x2 = torch.randn(1, 4, 64, generator=g), torch.randn(1, 4, 64, generator=g)
    ctx = torch.randn(1, 14, 128, generator=g)
    cache = DynamicCache()
    with torch.no_grad():
        model(
            position_ids=torch.arange(14)[None],
            noise_embedding=x1,
            target_hidden=ctx[:, :10],
            past_key_values=cache,
            use_cache=True,
        )
        cache.crop(10 - cache.get_seq_length())  # negative: drop the block's rows
        cached = model(
            position_ids=torch.arange(10, 18)[None],
            noise_embedding=x2,
            target_hidden=ctx[:, 10:],
            past_key_values=cache,
            use_cache=True,
        )
        whole = model(position_ids=torch.arange(18)[None], noise_embedding=x2, target_hidden=ctx)
    torch.testing.assert_close(cached, whole, rtol=1e-5, atol=1e-5)


def test_the_modelling_file_imports_only_torch_and_transformers():
    tree = ast.parse(Path(export.MODELING_SOURCE).read_text())
    roots = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert roots <= {"__future__", "torch", "transformers"}, roots
