"""DFlash loss: same-position cross-entropy with exponential position decay, plus metrics.

Block position k (k = 1..B-1) of the block anchored at a predicts input_ids[a + k] (the
"same-position" convention of z-lab/dflash; an off-by-one label shift was the bug fixed in
sgl-project/SpecForge#473). Position 0 holds the anchor token itself and is not predicted.

Weight of a prediction = keep(block) x in-bounds(a + k < L) x loss_mask[a + k] (x, in packed
rows, doc(a + k) == doc(a): inference never drafts across a document end) x w_k with
w_k = exp(-(k - 1) / gamma) (paper Eq. 4 as quoted by SpecForge `train_dflash.py`: an error at k
invalidates every later position). The loss is sum(w * CE) / sum(w).

Metrics: per-position correct/total counts, and the simulated acceptance length of a block,
1 + sum_k prod_{i<=k} correct_i (SpecForge `compute_accept_len`), where a prediction without a
valid label counts as not accepted (it ends the chain).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F


class LossOut(NamedTuple):
    """What one objective forward returns (a NamedTuple: traceable by Dynamo)."""

    loss: torch.Tensor
    """Scalar, weighted mean CE (0 when no prediction carries weight)."""
    correct: torch.Tensor
    """[B_s - 1] float: correct greedy predictions per block position (valid labels only)."""
    counts: torch.Tensor
    """[B_s - 1] float: predictions with a valid label per block position."""
    accept_sum: torch.Tensor
    """Scalar float: sum over kept blocks of the simulated acceptance length."""
    num_blocks: torch.Tensor
    """Scalar float: kept blocks (accept_sum / num_blocks = simulated tau)."""


def position_weights(block_size: int, gamma: float, *, device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[B_s - 1]: exp(-(k - 1) / gamma) for k = 1..B_s-1."""
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    if not gamma > 0 or math.isinf(gamma):
        raise ValueError(f"gamma must be a positive finite number, got {gamma}")
    k = torch.arange(1, block_size, device=device, dtype=torch.float32)
    return torch.exp(-(k - 1) / gamma).to(dtype)


def block_labels(
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    anchors: torch.Tensor,
    keep: torch.Tensor,
    block_size: int,
    doc_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(labels [B, N, B_s-1] int64, valid [B, N, B_s-1] bool) for block positions 1..B_s-1;
    doc_ids [B, L] (packed rows) drops labels outside the anchor's document."""
    seq_len = input_ids.shape[1]
    k = torch.arange(1, block_size, device=input_ids.device)
    pos = anchors[:, :, None] + k  # [B, N, B_s-1]
    in_bounds = pos < seq_len
    flat = pos.clamp(max=seq_len - 1).flatten(1)  # [B, N*(B_s-1)]
    labels = input_ids.gather(1, flat).view_as(pos)
    supervised = loss_mask.gather(1, flat).view_as(pos).bool()
    valid = keep[:, :, None] & in_bounds & supervised
    if doc_ids is not None:
        same_doc = doc_ids.gather(1, flat).view_as(pos) == doc_ids.gather(1, anchors)[:, :, None]
        valid = valid & same_doc
    return labels, valid


def block_loss(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, pos_weights: torch.Tensor) -> LossOut:
    """logits [B, N, B_s-1, V] (any float dtype; CE in float32), labels/valid [B, N, B_s-1]."""
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none")
    ce = ce.view_as(labels)
    w = valid.float() * pos_weights.float()
    loss = (ce * w).sum() / w.sum().clamp_min(1e-12)
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & valid  # [B, N, B_s-1]
        correct = hit.float().sum(dim=(0, 1))
        counts = valid.float().sum(dim=(0, 1))
        block_kept = valid.any(dim=-1)  # blocks with at least one label to score
        chain = hit.long().cumprod(dim=-1).sum(dim=-1).float()  # accepted drafts per block
        accept_sum = ((1.0 + chain) * block_kept.float()).sum()
        num_blocks = block_kept.float().sum()
    return LossOut(loss=loss, correct=correct, counts=counts, accept_sum=accept_sum, num_blocks=num_blocks)
