"""Random anchor sampling: where the training blocks start.

DFlash trains on blocks that start at random supervised positions (paper Sec. 4.2, as quoted by
SpecForge `specforge/core/dflash.py@ed201994`): random scores over valid positions, top-N,
sorted ascending, plus a keep-mask for rows with fewer than N valid positions (TorchSpec pads to
exactly N slots so Q_LEN stays constant: compile-friendly).

A position `a` of row r is a valid anchor when
  1 <= a                 (the block has at least one context row: context is kv < a),
  a + 1 < lengths[r]     (at least one in-bounds label: a partial block is allowed),
  loss_mask[r, a] and loss_mask[r, a + 1]
                         (SpecForge HEAD: the anchor and its first label are supervised).
Properties: anchors[r] is sorted over its kept slots, kept slots come first, unkept slots hold
anchor 0; the result depends only on (loss_mask, lengths, generator state), not on the device.
"""

from __future__ import annotations

import torch


def valid_anchor_mask(loss_mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """bool [B, L]: positions that may start a block (see module docstring)."""
    b, seq_len = loss_mask.shape
    pos = torch.arange(seq_len, device=loss_mask.device)
    sup = loss_mask.bool()
    nxt = torch.zeros_like(sup)
    nxt[:, :-1] = sup[:, 1:]
    in_bounds = (pos[None, :] + 1) < lengths.to(loss_mask.device)[:, None]
    return sup & nxt & in_bounds & (pos[None, :] >= 1)


def sample_anchors(
    loss_mask: torch.Tensor, lengths: torch.Tensor, num_anchors: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors [B, N] int64, keep [B, N] bool) on loss_mask's device.

    Scores are drawn on the generator's device (CPU generators are the norm) from a [B, L]
    uniform tensor, so the draw is reproducible given the generator seed. `block_size` is
    accepted for the contract (a block may run past the row end: labels are masked there).
    """
    if num_anchors < 1:
        raise ValueError(f"num_anchors must be >= 1, got {num_anchors}")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    device = loss_mask.device
    valid = valid_anchor_mask(loss_mask, lengths).to(generator.device)
    b, seq_len = valid.shape
    scores = torch.rand((b, seq_len), generator=generator, device=generator.device)
    scores = torch.where(valid, scores, torch.full_like(scores, -1.0))
    k = min(num_anchors, seq_len)
    top = scores.topk(k, dim=1).indices  # [B, k]
    top_valid = valid.gather(1, top)
    # Sort key: valid anchors by position first, then the invalid slots.
    key = torch.where(top_valid, top, top + seq_len).sort(dim=1).values
    keep = key < seq_len
    anchors = torch.where(keep, key, torch.zeros_like(key))
    if k < num_anchors:  # rows shorter than N: pad with empty slots
        pad = num_anchors - k
        anchors = torch.cat([anchors, anchors.new_zeros((b, pad))], dim=1)
        keep = torch.cat([keep, keep.new_zeros((b, pad))], dim=1)
    return anchors.to(device), keep.to(device)
