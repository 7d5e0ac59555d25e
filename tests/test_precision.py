"""train.precision=bf16-autocast: bf16 compute, float32 master weights, and it trains."""

from __future__ import annotations

import pytest
import torch
from small_models import objective_for, train_on

from dflash.anchors import sample_anchors
from dflash.config import DrafterConfig, TargetConfig, TrainConfig
from dflash.target import build_target
from harness.runtime.errors import ConfigError

BS = 4
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


def make_objective(target, precision, attention="auto", layer_types=None):
    cfg = DrafterConfig(num_layers=2, block_size=BS, layer_types=layer_types, sliding_window=6 if layer_types else None)
    return objective_for(cfg, target, attention, precision)


def make_batch(target, layer_ids, b=3, seq_len=32):
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([seq_len, seq_len - 8, seq_len - 20][:b])
    pos = torch.arange(seq_len)[None]
    input_ids = torch.randint(1, target.vocab_size - 1, (b, seq_len), generator=g) * (pos < lengths[:, None])
    loss_mask = ((pos < lengths[:, None]) & (pos >= 4)).long()
    context = target.hidden(input_ids, (pos < lengths[:, None]).long(), layer_ids)
    anchors, keep = sample_anchors(loss_mask, lengths, 6, BS, g)
    return input_ids, loss_mask, context, anchors, keep


def test_precision_is_validated_and_fp32_by_default():
    assert TrainConfig().precision == "fp32"
    with pytest.raises(ConfigError):
        TrainConfig(precision="bf16")


def test_bf16_autocast_trains_with_float32_master_weights(target):
    obj, ref = make_objective(target, "bf16-autocast"), make_objective(target, "fp32")
    batch = make_batch(target, obj.layer_ids)
    seen = []
    hook = obj.lm_head.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    first = obj(*batch)
    hook.remove()
    assert seen == [torch.bfloat16] and first.loss.dtype == torch.float32
    assert first.loss.item() != ref(*batch).loss.item()  # bf16 compute, not a renamed fp32 run
    torch.testing.assert_close(first.loss, ref(*batch).loss, rtol=2e-2, atol=0)
    grads = []
    losses = train_on(obj, obj, batch, 20, lambda: grads.extend(p.grad.dtype for p in obj.drafter.parameters()))
    assert grads and set(grads) == {torch.float32}
    assert all(p.dtype == torch.float32 for p in obj.drafter.parameters())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.5, losses


def test_bf16_autocast_flex_forward_matches_sdpa(target):
    # flex_attention needs q, k, v of one dtype: the fp32 norms and rope table would otherwise
    # leave q and k in fp32 beside a bf16 v. Forward only (flex has no CPU backward).
    flex = make_objective(target, "bf16-autocast", "flex", ("sliding_attention", "full_attention"))
    sdpa = make_objective(target, "bf16-autocast", "sdpa", ("sliding_attention", "full_attention"))
    batch = make_batch(target, flex.layer_ids)
    with torch.no_grad():
        torch.testing.assert_close(flex(*batch).loss, sdpa(*batch).loss, rtol=2e-2, atol=0)
