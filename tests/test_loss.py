"""Block loss: same-position labels, position decay, normalisation, metrics."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dflash.loss import block_labels, block_loss, position_weights


def test_position_weights_decay_from_one():
    w = position_weights(4, 2.0)
    torch.testing.assert_close(w, torch.tensor([1.0, math.exp(-0.5), math.exp(-1.0)]))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_position_weights_reject_bad_gamma(bad):
    with pytest.raises(ValueError):
        position_weights(4, bad)


def test_block_labels_are_same_position_and_masked():
    input_ids = torch.arange(100, 110)[None]  # token at position p is 100 + p
    loss_mask = torch.ones(1, 10, dtype=torch.long)
    loss_mask[0, 4] = 0
    anchors, keep = torch.tensor([[2, 7, 0]]), torch.tensor([[True, True, False]])
    labels, valid = block_labels(input_ids, loss_mask, anchors, keep, 4)
    assert labels[0, 0].tolist() == [103, 104, 105]  # block at 2: positions 3, 4, 5
    assert valid[0, 0].tolist() == [True, False, True]  # position 4 unsupervised
    assert labels[0, 1, :2].tolist() == [108, 109]
    assert valid[0, 1].tolist() == [True, True, False]  # position 10 is out of bounds
    assert not valid[0, 2].any()  # padded block


def _hand_loss(logits, labels, valid, w):
    num = den = 0.0
    for idx in torch.nonzero(valid).tolist():
        b, n, k = idx
        ce = F.cross_entropy(logits[b, n, k][None], labels[b, n, k][None]).item()
        num += w[k].item() * ce
        den += w[k].item()
    return num / den


def test_block_loss_equals_hand_weighted_mean():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 3, 11, generator=g)
    labels = torch.randint(0, 11, (2, 3, 3), generator=g)
    valid = torch.rand(2, 3, 3, generator=g) > 0.3
    w = position_weights(4, 1.5)
    out = block_loss(logits, labels, valid, w)
    assert out.loss.item() == pytest.approx(_hand_loss(logits, labels, valid, w), rel=1e-5)
    assert out.counts.tolist() == valid.sum(dim=(0, 1)).float().tolist()


def test_metrics_count_correct_positions_and_acceptance_chain():
    labels = torch.tensor([[[1, 2, 3], [4, 5, 6]]])
    valid = torch.ones_like(labels, dtype=torch.bool)
    pred = torch.tensor([[[1, 0, 3], [4, 5, 6]]])  # block 0 breaks at k=2; block 1 all right
    logits = F.one_hot(pred, 8).float() * 10
    out = block_loss(logits, labels, valid, position_weights(4, 2.0))
    assert out.correct.tolist() == [2.0, 1.0, 2.0]
    assert out.counts.tolist() == [2.0, 2.0, 2.0]
    assert out.num_blocks.item() == 2.0
    assert out.accept_sum.item() == (1 + 1) + (1 + 3)


def test_perfect_logits_give_near_zero_loss_and_full_acceptance():
    labels = torch.randint(0, 8, (2, 4, 3))
    valid = torch.ones_like(labels, dtype=torch.bool)
    out = block_loss(F.one_hot(labels, 8).float() * 50, labels, valid, position_weights(4, 2.0))
    assert out.loss.item() < 1e-6
    assert out.accept_sum.item() / out.num_blocks.item() == 4.0


def test_no_valid_label_gives_zero_loss_not_nan():
    logits = torch.randn(1, 2, 3, 5, requires_grad=True)
    labels = torch.zeros(1, 2, 3, dtype=torch.long)
    valid = torch.zeros(1, 2, 3, dtype=torch.bool)
    out = block_loss(logits, labels, valid, position_weights(4, 2.0))
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.isfinite(logits.grad).all()
    assert out.num_blocks.item() == 0.0
