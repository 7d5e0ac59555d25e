"""The tensors that cross the pipeline's channels.

`TokenBatch` goes from a prefetch thread to a target thread, `HiddenBatch` from a target thread to a
drafter thread. Both are plain records: every tensor in them is owned by the batch (collate builds
fresh arrays; the target allocates a fresh context per forward), so a consumer may keep or modify
them without racing the producer (no reused buffer is ever handed to another thread). `.to()`
returns a new object and never mutates the original, which another thread may still be reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class TokenBatch:
    seq: int
    """Global batch number in the run (epoch-major); decides anchors and replica order."""
    epoch: int
    bucket: int
    """Upper bound of the length bucket the rows came from. The padded length L is
    `input_ids.shape[1]`: equal to `bucket` unless collate was given `pad_to` (fixed shapes)."""
    indices: tuple[int, ...]
    """Dataset rows, one per real row; rows added by `pad_rows` have no index."""
    input_ids: torch.Tensor
    """[B, L] int64, right-padded with 0."""
    loss_mask: torch.Tensor
    """[B, L] int64, 1 on supervised tokens, 0 on prompt tokens and on padding."""
    lengths: torch.Tensor
    """[B] int64 real lengths (0 for padding rows)."""
    doc_ids: torch.Tensor | None = None
    """[B, L] int64 document of each token when the dataset packs several documents per row (its
    `doc_ids` column), -1 on padding (a padding token belongs to no document); None otherwise.
    The target and the drafter objective attend only within a document when it is set."""

    @property
    def num_tokens(self) -> int:
        """Real (unpadded) tokens in the batch."""
        return int(self.lengths.sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TokenBatch:
        return TokenBatch(
            seq=self.seq,
            epoch=self.epoch,
            bucket=self.bucket,
            indices=self.indices,
            input_ids=self.input_ids.to(device, non_blocking=non_blocking),
            loss_mask=self.loss_mask.to(device, non_blocking=non_blocking),
            lengths=self.lengths.to(device, non_blocking=non_blocking),
            doc_ids=None if self.doc_ids is None else self.doc_ids.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> TokenBatch:
        """Page-locked copy, so a later `.to(cuda, non_blocking=True)` is truly asynchronous."""
        return TokenBatch(
            seq=self.seq,
            epoch=self.epoch,
            bucket=self.bucket,
            indices=self.indices,
            input_ids=self.input_ids.pin_memory(),
            loss_mask=self.loss_mask.pin_memory(),
            lengths=self.lengths.pin_memory(),
            doc_ids=None if self.doc_ids is None else self.doc_ids.pin_memory(),
        )


@dataclass(slots=True)
class HiddenBatch:
    tokens: TokenBatch
    context: torch.Tensor
    """[B, L, k*H] tapped target hidden states; owned (fresh per target forward)."""

    def to(self, device: torch.device | str, non_blocking: bool = False) -> HiddenBatch:
        return HiddenBatch(
            tokens=self.tokens.to(device, non_blocking=non_blocking),
            context=self.context.to(device, non_blocking=non_blocking),
        )
