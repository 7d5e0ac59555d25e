"""The DFlash training attention mask, in one mask_mod shared by the flex and SDPA paths.

Layout: queries are the N*B block rows (block n = rows n*B .. n*B+B-1); keys are the S context
rows followed by the same N*B block rows (KV_LEN = S + N*B). Query block n with anchor a_n may see
  - context kv < a_n, STRICTLY: the target state at the anchor does not exist yet at inference
    (the `<=` version was the bug fixed in sgl-project/SpecForge#473);
  - every row of its own block, bidirectionally (causal in-block was fixed in SpecForge#427);
  - nothing of other blocks; and a padded block (keep False) sees nothing at all;
  - with `doc_ids` [B, S] (packed rows): only context of the anchor's document
    (vllm-project/speculators `create_anchor_block_mask_mod`);
  - with `window` (sliding_attention layers): only keys whose position is within window - 1 of
    the query's, both ways (drafter.in_window; query position a_n + offset, a context row's
    position is its index, a block row's a_n + its offset). SpecForge's sliding mask has the same
    context bound but makes the block causal; we keep it bidirectional, as z-lab's flash-attn
    inference sees it (drafter.py).
`dense_mask` evaluates the SAME function by broadcasting, so the SDPA path (CPU, where flex has no
backward) and the flex path (CUDA) cannot drift apart. BlockMasks use H=None: a per-head mask
OOMs at long context (SpecForge#452).
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import create_block_mask

from dflash.drafter import DenseMask, in_window


def anchor_block_mask_mod(
    anchors: torch.Tensor,
    keep: torch.Tensor,
    block_size: int,
    seq_len: int,
    doc_ids: torch.Tensor | None = None,
    window: int | None = None,
):
    """mask_mod(b, h, q_idx, kv_idx) -> bool for anchors/keep [B, N] and S = seq_len.

    Only tensor ops on its arguments (no Python branching on values): it runs under vmap in
    create_block_mask, under broadcasting in dense_mask, and inside a compiled forward.
    """

    def mask_mod(b, h, q_idx, kv_idx):
        blk = q_idx // block_size
        anchor = anchors[b, blk]
        is_ctx = kv_idx < seq_len
        ctx_ok = is_ctx & (kv_idx < anchor)
        if doc_ids is not None:
            ctx_kv = torch.clamp(kv_idx, max=seq_len - 1)  # keep the gather in range
            ctx_ok = ctx_ok & (doc_ids[b, ctx_kv] == doc_ids[b, anchor])
        same_blk = (~is_ctx) & ((kv_idx - seq_len) // block_size == blk)
        ok = ctx_ok | same_blk
        if window is not None:
            kv_pos = torch.where(is_ctx, kv_idx, anchor + (kv_idx - seq_len) % block_size)
            ok = ok & in_window(anchor + q_idx % block_size, kv_pos, window)
        return keep[b, blk] & ok

    return mask_mod


def _lengths(anchors: torch.Tensor, block_size: int, seq_len: int) -> tuple[int, int, int]:
    b, n = anchors.shape
    q_len = n * block_size
    return b, q_len, seq_len + q_len


def dense_mask(
    anchors: torch.Tensor,
    keep: torch.Tensor,
    block_size: int,
    seq_len: int,
    doc_ids: torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """bool [B, 1, Q, KV]: the mask_mod evaluated on broadcast index grids."""
    b, q_len, kv_len = _lengths(anchors, block_size, seq_len)
    dev = anchors.device
    bi = torch.arange(b, device=dev)[:, None, None, None]
    hi = torch.zeros(1, dtype=torch.long, device=dev)[None, :, None, None]
    qi = torch.arange(q_len, device=dev)[None, None, :, None]
    ki = torch.arange(kv_len, device=dev)[None, None, None, :]
    mod = anchor_block_mask_mod(anchors, keep, block_size, seq_len, doc_ids, window)
    return mod(bi, hi, qi, ki).expand(b, 1, q_len, kv_len)


def sdpa_mask(
    anchors: torch.Tensor,
    keep: torch.Tensor,
    block_size: int,
    seq_len: int,
    doc_ids: torch.Tensor | None = None,
    window: int | None = None,
) -> DenseMask:
    """DenseMask for the drafter's SDPA path (allowed mask + rows that see anything)."""
    allowed = dense_mask(anchors, keep, block_size, seq_len, doc_ids, window)
    return DenseMask(allowed=allowed, row_valid=allowed.any(dim=-1, keepdim=True))


def flex_block_mask(
    anchors: torch.Tensor,
    keep: torch.Tensor,
    block_size: int,
    seq_len: int,
    doc_ids: torch.Tensor | None = None,
    window: int | None = None,
):
    """BlockMask (H=None) on anchors' device from the same mask_mod.

    Called inside the compiled objective forward, the mask_mod closure is re-created each step
    but has one code object whose captured tensors are graph inputs, so a new anchor draw does
    not recompile (a BlockMask built outside and passed in guards on its closure; TorchSpec
    raised recompile_limit to work around that).
    """
    b, q_len, kv_len = _lengths(anchors, block_size, seq_len)
    mod = anchor_block_mask_mod(anchors, keep, block_size, seq_len, doc_ids, window)
    return create_block_mask(mod, B=b, H=None, Q_LEN=q_len, KV_LEN=kv_len, device=anchors.device)
