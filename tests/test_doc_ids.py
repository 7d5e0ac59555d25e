"""Document ids of packed rows through the objective: no attention, no label across a document."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from small_models import objective_for

from dflash.config import DrafterConfig, TargetConfig
from dflash.loss import block_labels
from dflash.step import make_inputs
from dflash.target import build_target

BS = 4
SEQ, CUT = 32, 14  # one row: document 0 at positions 0..13, document 1 at 14..31


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


@pytest.fixture(scope="module")
def obj(target):
    cfg = DrafterConfig(num_layers=2, block_size=BS)
    return objective_for(cfg, target)


def packed_row(target, layer_ids):
    """Two documents in one row, each with a prompt (loss 0; document 1's is one token) and an
    answer; anchors in both."""
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, target.vocab_size - 1, (1, SEQ), generator=g)
    pos = torch.arange(SEQ)[None]
    loss_mask = (((pos >= 3) & (pos < CUT)) | (pos >= CUT + 1)).long()
    doc_ids = (pos >= CUT).long()
    context = target.hidden(input_ids, torch.ones_like(input_ids), layer_ids)
    # Block 1 is anchored at document 0's last token: its labels lie in document 1.
    anchors, keep = torch.tensor([[5, CUT - 1, CUT + 4, CUT + 10]]), torch.ones(1, 4, dtype=torch.bool)
    return input_ids, loss_mask, context, anchors, keep, doc_ids


def test_no_block_attends_across_the_document_boundary(target, obj):
    *_, anchors, keep, doc_ids = packed_row(target, obj.layer_ids)
    allowed = obj._masks(anchors, keep, SEQ, doc_ids, flex=False).allowed[0, 0]  # [Q, S + Q]
    q_doc = doc_ids[0, anchors[0]].repeat_interleave(BS)  # each block's document
    ctx_doc = doc_ids[0]
    crossing = allowed[:, :SEQ] & (q_doc[:, None] != ctx_doc[None, :])
    assert not crossing.any()
    assert allowed[2 * BS :, CUT : CUT + 4].all()  # document 1's blocks still see its own context
    without = obj._masks(anchors, keep, SEQ, None, flex=False).allowed[0, 0]
    assert (without[:, :SEQ] & (q_doc[:, None] != ctx_doc[None, :])).any()  # the case can cross


def test_the_other_document_cannot_move_a_block(target, obj):
    input_ids, _, context, anchors, keep, doc_ids = packed_row(target, obj.layer_ids)
    shifted = context.clone()
    shifted[:, :CUT] += 4.0  # document 0's target states only
    outs = []
    for ctx in (context, shifted):
        ids, positions = obj._block_inputs(input_ids, anchors)
        mask = obj._masks(anchors, keep, SEQ, doc_ids, flex=False)
        with torch.no_grad():
            outs.append(obj.drafter(obj.embed(ids), ctx, positions, mask))
    torch.testing.assert_close(outs[1][:, 2 * BS :], outs[0][:, 2 * BS :], rtol=0, atol=0)
    assert not torch.allclose(outs[1][:, : 2 * BS], outs[0][:, : 2 * BS])


def test_labels_outside_the_anchors_document_carry_no_weight(target, obj):
    input_ids, loss_mask, _, anchors, keep, doc_ids = packed_row(target, obj.layer_ids)
    _, valid = block_labels(input_ids, loss_mask, anchors, keep, BS, doc_ids)
    _, valid_flat = block_labels(input_ids, loss_mask, anchors, keep, BS)
    assert valid_flat[0, 1].any() and not valid[0, 1].any()  # block at 13 predicts 14..16: doc 1
    assert torch.equal(valid[0, [0, 2, 3]], valid_flat[0, [0, 2, 3]])


def test_document_ids_change_the_loss_and_one_document_changes_nothing(target, obj):
    input_ids, loss_mask, context, anchors, keep, doc_ids = packed_row(target, obj.layer_ids)
    with torch.no_grad():
        plain = obj(input_ids, loss_mask, context, anchors, keep)
        packed = obj(input_ids, loss_mask, context, anchors, keep, doc_ids)
        single = obj(input_ids, loss_mask, context, anchors, keep, torch.zeros_like(doc_ids))
    assert torch.isfinite(packed.loss) and packed.loss.item() != plain.loss.item()
    assert packed.counts.sum() < plain.counts.sum()
    assert torch.equal(single.loss, plain.loss) and torch.equal(single.counts, plain.counts)


def test_a_batch_with_document_ids_carries_them_into_the_step(target, obj):
    input_ids, loss_mask, context, _, _, doc_ids = packed_row(target, obj.layer_ids)
    tok = SimpleNamespace(
        input_ids=input_ids, loss_mask=loss_mask, lengths=torch.tensor([SEQ]), indices=(0,), bucket=SEQ, seq=3
    )
    dcfg = DrafterConfig(block_size=BS, num_anchors=4)
    plain = make_inputs(
        SimpleNamespace(tokens=tok, context=context), dcfg, seed=0, device=torch.device("cpu"), dtype=torch.float32
    )
    assert plain.doc_ids is None and len(plain.as_args()) == 5
    tok.doc_ids = doc_ids
    packed = make_inputs(
        SimpleNamespace(tokens=tok, context=context), dcfg, seed=0, device=torch.device("cpu"), dtype=torch.float32
    )
    assert torch.equal(packed.as_args()[5], doc_ids) and torch.equal(packed.anchors, plain.anchors)
    with torch.no_grad():
        assert obj(*packed.as_args()).loss.item() != obj(*plain.as_args()).loss.item()
