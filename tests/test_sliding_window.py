"""Sliding-window layers: config, the window at inference and in training, flex against SDPA."""

from __future__ import annotations

import pytest
import torch
from small_models import objective_for, train_on

from dflash.anchors import sample_anchors
from dflash.config import DrafterConfig, RunConfig, TargetConfig, apply_overrides
from dflash.drafter import DFlashDrafter
from dflash.masks import dense_mask
from dflash.objective import DFlashObjective
from dflash.target import build_target
from harness.runtime.errors import ConfigError

BS = 4
MIXED = ("sliding_attention", "full_attention")
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


def make_objective(target, layer_types=MIXED, window=6, attention="auto") -> DFlashObjective:
    cfg = DrafterConfig(
        num_layers=len(layer_types), block_size=BS, layer_types=layer_types, sliding_window=window, attention=attention
    )
    return objective_for(cfg, target, attention)


def make_batch(target, layer_ids, seed=0, b=2, seq_len=32, num_anchors=5):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([seq_len, seq_len - 6][:b])
    pos = torch.arange(seq_len)[None]
    input_ids = torch.randint(1, target.vocab_size - 1, (b, seq_len), generator=g) * (pos < lengths[:, None])
    loss_mask = ((pos < lengths[:, None]) & (pos >= 4)).long()
    context = target.hidden(input_ids, (pos < lengths[:, None]).long(), layer_ids)
    anchors, keep = sample_anchors(loss_mask, lengths, num_anchors, BS, g)
    return input_ids, loss_mask, context, anchors, keep


@pytest.mark.parametrize(
    "kw",
    [
        {"num_layers": 2, "layer_types": ("full_attention",)},
        {"num_layers": 1, "layer_types": ("local",)},
        {"num_layers": 1, "layer_types": ("sliding_attention",)},
        {"num_layers": 1, "sliding_window": 0},
    ],
)
def test_bad_layer_layouts_are_config_errors(kw):
    with pytest.raises(ConfigError):
        DrafterConfig(**kw)


def test_layer_types_and_window_come_from_the_command_line():
    cfg = apply_overrides(
        RunConfig(),
        ["drafter.num_layers=2", "drafter.sliding_window=8", "drafter.layer_types=sliding_attention,full_attention"],
    )
    assert cfg.drafter.layer_types == MIXED and cfg.drafter.sliding_window == 8
    assert DrafterConfig().layer_types is None  # default: every layer full, as before


def _drafter(layer_types, window=4, seed=0):
    cfg = DrafterConfig(
        num_layers=len(layer_types), block_size=BS, layer_types=layer_types, sliding_window=window, init_seed=seed
    )
    return DFlashDrafter(cfg, hidden_size=64, num_target_layers=8, vocab_size=256, layer_ids=(1, 5))


def test_a_sliding_layer_sees_only_its_window_at_inference():
    g = torch.Generator().manual_seed(0)
    x, ctx, pos = torch.randn(1, BS, 64, generator=g), torch.randn(1, 12, 128, generator=g), torch.arange(16)[None]
    far = ctx.clone()
    far[:, :8] += 3.0  # positions 0..7: more than 3 before every query (12..15)
    near = ctx.clone()
    near[:, 9] += 3.0  # position 9: within 3 of query 12
    sliding, full = _drafter(("sliding_attention",)), _drafter(("full_attention",))
    with torch.no_grad():
        base = sliding(x, ctx, pos)
        assert torch.equal(sliding(x, far, pos), base)
        assert not torch.allclose(sliding(x, near, pos), base)
        assert not torch.allclose(full(x, far, pos), full(x, ctx, pos))


def test_a_drafter_with_sliding_layers_refuses_one_mask_for_all_layers():
    drafter = _drafter(MIXED)
    anchors, keep = torch.tensor([[5]]), torch.tensor([[True]])
    from dflash.masks import sdpa_mask

    with pytest.raises(ValueError, match="by layer type"):
        drafter(
            torch.randn(1, BS, 64), torch.randn(1, 10, 128), torch.arange(14)[None], sdpa_mask(anchors, keep, BS, 10)
        )


def test_the_objective_builds_one_mask_per_layer_kind(target):
    obj = make_objective(target)
    _, _, _, anchors, keep = make_batch(target, obj.layer_ids)
    masks = obj._masks(anchors, keep, 32, None, flex=False)
    assert set(masks) == set(MIXED)
    assert torch.equal(masks["sliding_attention"].allowed, dense_mask(anchors, keep, BS, 32, window=6))
    assert torch.equal(masks["full_attention"].allowed, dense_mask(anchors, keep, BS, 32))
    full_only = make_objective(target, layer_types=("full_attention",) * 2)
    assert torch.equal(full_only._masks(anchors, keep, 32, None, flex=False).allowed, masks["full_attention"].allowed)


def test_a_window_wider_than_the_row_trains_exactly_like_full_attention(target):
    full = make_objective(target, layer_types=("full_attention",) * 2)
    wide, narrow = make_objective(target, window=64), make_objective(target, window=3)
    batch = make_batch(target, full.layer_ids)
    assert torch.equal(wide(*batch).loss, full(*batch).loss)
    assert not torch.allclose(narrow(*batch).loss, full(*batch).loss)


def test_a_mixed_layer_objective_trains_on_the_sdpa_path(target):
    obj = make_objective(target, window=5)
    batch = make_batch(target, obj.layer_ids)
    losses = train_on(obj, obj, batch, 25)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.5, losses


def test_compiled_flex_objective_with_mixed_layers_matches_sdpa_without_recompiling(target):
    # Forward only: flex_attention has no backward on CPU (NotImplementedError).
    flex, sdpa = make_objective(target, attention="flex"), make_objective(target, attention="sdpa")
    b1, b2 = make_batch(target, flex.layer_ids, seed=0), make_batch(target, flex.layer_ids, seed=1)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fn = torch.compile(flex, backend="aot_eager")
    with torch.no_grad():
        for b in (b1, b2):
            torch.testing.assert_close(fn(*b).loss, sdpa(*b).loss, atol=1e-4, rtol=1e-4)
    counters = torch._dynamo.utils.counters
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
