"""The anchor-block mask: hand-loop reference, flex/SDPA equivalence, regression cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import create_mask

from dflash.anchors import sample_anchors, valid_anchor_mask
from dflash.config import DrafterConfig
from dflash.drafter import DFlashDrafter, attend
from dflash.masks import anchor_block_mask_mod, dense_mask, flex_block_mask, sdpa_mask

BS = 4
# The eager flex forward on CPU is the point of the equivalence tests, not a mistake.
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def hand_mask(anchors, keep, block_size, seq_len, doc_ids=None, window=None):
    """The rule written as plain loops, independent of the mask_mod. With a window, a query at
    position a + o sees a key at position p only if |a + o - p| <= window - 1."""
    b, n = anchors.shape
    q_len = n * block_size
    out = torch.zeros(b, 1, q_len, seq_len + q_len, dtype=torch.bool)
    near = (lambda qp, kp: True) if window is None else (lambda qp, kp: abs(qp - kp) <= window - 1)
    for r in range(b):
        for blk in range(n):
            if not keep[r, blk]:
                continue
            a = int(anchors[r, blk])
            for o in range(block_size):
                qi = blk * block_size + o
                for kv in range(a):
                    if (doc_ids is None or doc_ids[r, kv] == doc_ids[r, a]) and near(a + o, kv):
                        out[r, 0, qi, kv] = True
                for j in range(block_size):
                    out[r, 0, qi, seq_len + blk * block_size + j] = near(a + o, a + j)
    return out


def _case(seed=0, b=3, seq_len=24, n=5):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([seq_len, seq_len - 9, 4][:b])
    loss_mask = (torch.arange(seq_len)[None] < lengths[:, None]).long()
    loss_mask[:, :3] = 0
    anchors, keep = sample_anchors(loss_mask, lengths, n, BS, g)
    return anchors, keep, seq_len


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dense_mask_matches_hand_loop(seed):
    anchors, keep, seq_len = _case(seed)
    assert keep.any() and not keep.all()  # the case covers kept and padded blocks
    assert torch.equal(dense_mask(anchors, keep, BS, seq_len), hand_mask(anchors, keep, BS, seq_len))


def test_dense_mask_with_document_ids_matches_hand_loop():
    anchors, keep, seq_len = _case(3)
    doc_ids = (torch.arange(seq_len) // 7).expand(anchors.shape[0], -1).contiguous()
    got = dense_mask(anchors, keep, BS, seq_len, doc_ids)
    assert torch.equal(got, hand_mask(anchors, keep, BS, seq_len, doc_ids))
    assert not torch.equal(got, dense_mask(anchors, keep, BS, seq_len))


@st.composite
def mask_cases(draw):
    """Random anchors/keep/doc ids and a window, small enough for the hand loop."""
    block_size = draw(st.integers(2, 5))
    seq_len = draw(st.integers(block_size + 2, 24))
    b, n = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    anchors = torch.tensor(
        [sorted(draw(st.lists(st.integers(1, seq_len - 2), min_size=n, max_size=n))) for _ in range(b)]
    )
    keep = torch.tensor([draw(st.lists(st.booleans(), min_size=n, max_size=n)) for _ in range(b)])
    doc_ids = None
    if draw(st.booleans()):  # packed rows: non-decreasing document ids
        cuts = [draw(st.lists(st.integers(1, seq_len - 1), max_size=3)) for _ in range(b)]
        doc_ids = torch.tensor([[sum(p >= c for c in row) for p in range(seq_len)] for row in cuts])
    window = draw(st.integers(1, seq_len + block_size + 2))
    return anchors, keep, block_size, seq_len, doc_ids, window


@settings(max_examples=80, deadline=None)
@given(mask_cases())
def test_windowed_dense_mask_matches_hand_loop_and_lies_inside_the_full_mask(case):
    anchors, keep, block_size, seq_len, doc_ids, window = case
    got = dense_mask(anchors, keep, block_size, seq_len, doc_ids, window)
    assert torch.equal(got, hand_mask(anchors, keep, block_size, seq_len, doc_ids, window))
    full = dense_mask(anchors, keep, block_size, seq_len, doc_ids)
    assert not (got & ~full).any()  # the window only takes away
    if window >= seq_len + block_size:  # a window longer than any distance takes nothing away
        assert torch.equal(got, full)


def test_window_bounds_context_and_keeps_the_block_bidirectional():
    anchors, keep = torch.tensor([[10]]), torch.tensor([[True]])
    m = dense_mask(anchors, keep, BS, 16, window=5)[0, 0]  # queries at positions 10..13
    assert m[0, 6:10].all() and not m[0, :6].any()  # position 10 sees context 6..9 only
    assert m[3, 9] and not m[3, 8]  # position 13 sees context down to 9
    assert m[:, 16 : 16 + BS].all()  # a window of 5 holds the whole block of 4, both ways
    narrow = dense_mask(anchors, keep, BS, 16, window=2)[0, 0]
    assert narrow[1, 16:19].all() and not narrow[1, 19] and not narrow[0, 18]


def test_windowed_dense_mask_equals_flex_create_mask():
    anchors, keep, seq_len = _case(10)
    b, n = anchors.shape
    mod = anchor_block_mask_mod(anchors, keep, BS, seq_len, window=6)
    ref = create_mask(mod, b, 1, n * BS, seq_len + n * BS, device="cpu")
    assert torch.equal(dense_mask(anchors, keep, BS, seq_len, window=6), ref)
    assert not torch.equal(ref, dense_mask(anchors, keep, BS, seq_len))


def test_dense_mask_equals_flex_create_mask():
    anchors, keep, seq_len = _case(4)
    b, n = anchors.shape
    mod = anchor_block_mask_mod(anchors, keep, BS, seq_len)
    ref = create_mask(mod, b, 1, n * BS, seq_len + n * BS, device="cpu")
    assert torch.equal(dense_mask(anchors, keep, BS, seq_len), ref)


def test_context_is_strictly_before_anchor_specforge_473_regression():
    anchors, keep = torch.tensor([[6]]), torch.tensor([[True]])
    m = dense_mask(anchors, keep, BS, 10)[0, 0]
    assert m[:, 5].all() and not m[:, 6].any() and not m[:, 7:10].any()


def test_block_is_bidirectional_specforge_427_regression():
    anchors, keep = torch.tensor([[2, 5]]), torch.tensor([[True, True]])
    m = dense_mask(anchors, keep, BS, 8)[0, 0]
    first_block = m[0:BS, 8 : 8 + BS]
    assert first_block.all()  # row 0 sees row B-1 of its own block
    assert not m[0:BS, 8 + BS :].any() and not m[BS:, 8 : 8 + BS].any()  # blocks isolated


def test_padded_block_sees_nothing():
    anchors, keep = torch.tensor([[3, 0]]), torch.tensor([[True, False]])
    m = dense_mask(anchors, keep, BS, 8)[0, 0]
    assert not m[BS:].any() and m[:BS].any()


def _qkv(anchors, seq_len, heads=4, kv_heads=2, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, n = anchors.shape
    kv_len = seq_len + n * BS
    q = torch.randn(b, heads, n * BS, d, generator=g)
    k = torch.randn(b, kv_heads, kv_len, d, generator=g)
    v = torch.randn(b, kv_heads, kv_len, d, generator=g)
    return q, k, v


def test_flex_forward_matches_sdpa_dense_mask_on_cpu():
    anchors, keep, seq_len = _case(5)
    q, k, v = _qkv(anchors, seq_len)
    dense_out = attend(q, k, v, sdpa_mask(anchors, keep, BS, seq_len))
    flex_out = attend(q, k, v, flex_block_mask(anchors, keep, BS, seq_len))
    assert torch.isfinite(dense_out).all()
    torch.testing.assert_close(flex_out, dense_out, atol=1e-5, rtol=1e-5)
    padded_rows = (~keep).repeat_interleave(BS, dim=1)  # [B, N*BS]
    assert (dense_out.permute(0, 2, 1, 3)[padded_rows] == 0).all()


def test_flex_forward_matches_sdpa_with_document_ids():
    anchors, keep, seq_len = _case(9)
    doc_ids = (torch.arange(seq_len) // 5).expand(anchors.shape[0], -1).contiguous()
    q, k, v = _qkv(anchors, seq_len, seed=2)
    dense_out = attend(q, k, v, sdpa_mask(anchors, keep, BS, seq_len, doc_ids))
    flex_out = attend(q, k, v, flex_block_mask(anchors, keep, BS, seq_len, doc_ids))
    torch.testing.assert_close(flex_out, dense_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [1, 3, 7])
def test_flex_forward_matches_sdpa_with_a_window(window):
    anchors, keep, seq_len = _case(11)
    doc_ids = (torch.arange(seq_len) // 9).expand(anchors.shape[0], -1).contiguous()
    q, k, v = _qkv(anchors, seq_len, seed=3)
    dense_out = attend(q, k, v, sdpa_mask(anchors, keep, BS, seq_len, doc_ids, window))
    flex_out = attend(q, k, v, flex_block_mask(anchors, keep, BS, seq_len, doc_ids, window))
    assert torch.isfinite(dense_out).all()
    torch.testing.assert_close(flex_out, dense_out, atol=1e-5, rtol=1e-5)


def test_sdpa_path_gradients_are_finite_with_padded_blocks():
    anchors, keep, seq_len = _case(6)
    assert not keep.all()
    q, k, v = (t.requires_grad_() for t in _qkv(anchors, seq_len))
    attend(q, k, v, sdpa_mask(anchors, keep, BS, seq_len)).square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def _drafter(hidden=64, taps=2):
    cfg = DrafterConfig(num_layers=2, block_size=BS)
    return DFlashDrafter(cfg, hidden_size=hidden, num_target_layers=4, vocab_size=256, layer_ids=tuple(range(taps)))


def test_drafter_forward_flex_equals_sdpa_on_cpu():
    anchors, keep, seq_len = _case(7)
    b, n = anchors.shape
    g = torch.Generator().manual_seed(1)
    drafter = _drafter()
    x = torch.randn(b, n * BS, 64, generator=g)
    ctx = torch.randn(b, seq_len, 128, generator=g)
    pos = torch.cat([torch.arange(seq_len).expand(b, -1), (anchors[:, :, None] + torch.arange(BS)).flatten(1)], dim=1)
    with torch.no_grad():
        ref = drafter(x, ctx, pos, sdpa_mask(anchors, keep, BS, seq_len))
        got = drafter(x, ctx, pos, flex_block_mask(anchors, keep, BS, seq_len))
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.cuda
def test_flex_gradients_match_sdpa_on_cuda():
    anchors, keep, seq_len = _case(8)
    anchors, keep = anchors.cuda(), keep.cuda()
    grads = []
    for make in (sdpa_mask, flex_block_mask):
        q, k, v = (t.cuda().requires_grad_() for t in _qkv(anchors, seq_len))
        attend(q, k, v, make(anchors, keep, BS, seq_len)).square().sum().backward()
        grads.append([t.grad for t in (q, k, v)])
    for g_sdpa, g_flex in zip(*grads):
        torch.testing.assert_close(g_flex, g_sdpa, atol=1e-4, rtol=1e-4)


def _rows(seq_len=40):
    lengths = torch.tensor([40, 25, 12, 2])
    loss_mask = (torch.arange(seq_len)[None] < lengths[:, None]).long()
    loss_mask[:, :5] = 0
    loss_mask[1, 10:14] = 0  # a prompt-like hole inside row 1
    return loss_mask, lengths


def test_sample_anchors_is_deterministic_given_the_generator():
    loss_mask, lengths = _rows()
    a1, k1 = sample_anchors(loss_mask, lengths, 8, BS, torch.Generator().manual_seed(7))
    a2, k2 = sample_anchors(loss_mask, lengths, 8, BS, torch.Generator().manual_seed(7))
    a3, _ = sample_anchors(loss_mask, lengths, 8, BS, torch.Generator().manual_seed(8))
    assert torch.equal(a1, a2) and torch.equal(k1, k2) and not torch.equal(a1, a3)


@pytest.mark.parametrize("num_anchors", [1, 8, 64])
def test_sample_anchors_are_valid_sorted_and_padded_last(num_anchors):
    loss_mask, lengths = _rows()
    anchors, keep = sample_anchors(loss_mask, lengths, num_anchors, BS, torch.Generator().manual_seed(0))
    assert anchors.shape == keep.shape == (4, num_anchors)
    valid = valid_anchor_mask(loss_mask, lengths)
    for r in range(4):
        kept = anchors[r][keep[r]].tolist()
        assert kept == sorted(set(kept))
        assert all(valid[r, a] and loss_mask[r, a + 1] and a + 1 < lengths[r] and a >= 1 for a in kept)
        assert len(kept) == min(num_anchors, int(valid[r].sum()))
        n_kept = len(kept)
        assert keep[r, :n_kept].all() and not keep[r, n_kept:].any()
        assert (anchors[r, n_kept:] == 0).all()
    assert not keep[3].any()  # a 2-token row has no anchor with a label


def test_valid_anchor_mask_skips_prompt_holes_and_row_ends():
    loss_mask, lengths = _rows()
    valid = valid_anchor_mask(loss_mask, lengths)
    assert not valid[1, 9] and not valid[1, 10:14].any() and valid[1, 14]
    assert valid[0, 38] and not valid[0, 39]
