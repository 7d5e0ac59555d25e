"""Planned batch -> padded `TokenBatch` of owned tensors.

Rows are right-padded with token 0 to the bucket bound (or to `pad_to`); `loss_mask` is 0 on
padding. The persistent-buffers fix wants one shape for every batch (static buffers, one compiled
graph: cudagraph trees record a graph per shape), so it passes `pad_to` = the largest bucket and
`pad_rows` = the largest batch size; extra rows are all padding with `loss_mask` 0 and length 0, so
they add nothing to the loss. A dataset with a `doc_ids` column (packed documents) gives `doc_ids`
of the same shape, -1 on padding; otherwise it is None.

The arrays are built fresh from the (memory-mapped) dataset on every call: the tensors own their
memory and may cross a channel without a clone (no reused buffer reaches another thread).
"""

from __future__ import annotations

import numpy as np
import torch

from dflash.batch import TokenBatch
from dflash.buckets import Batch
from dflash.data import TokenDataset


def collate(
    ds: TokenDataset,
    batch: Batch,
    seq: int,
    epoch: int,
    pad_to: int | None = None,
    pad_rows: int | None = None,
) -> TokenBatch:
    """Pad the rows of `batch` into [B, L] tensors; B = pad_rows or len(indices), L = pad_to or bucket."""
    length = batch.bucket if pad_to is None else pad_to
    if length < batch.bucket:
        raise ValueError(f"pad_to={pad_to} is shorter than bucket {batch.bucket}")
    num_rows = len(batch.indices) if pad_rows is None else pad_rows
    if num_rows < len(batch.indices):
        raise ValueError(f"pad_rows={pad_rows} is smaller than the batch ({len(batch.indices)} rows)")
    input_ids = np.zeros((num_rows, length), dtype=np.int64)  # [B, L]
    loss_mask = np.zeros((num_rows, length), dtype=np.int64)  # [B, L]
    lengths = np.zeros(num_rows, dtype=np.int64)  # [B]
    # -1 on padding: a padding token shares no document with a real one.
    doc_ids = np.full((num_rows, length), -1, dtype=np.int64) if ds.has_doc_ids else None  # [B, L]
    for r, index in enumerate(batch.indices):
        ids, mask = ds.row(index)
        n = ids.shape[0]
        if n > batch.bucket:
            # The plan put a row in a bucket too small for it: a planning bug, not bad input.
            raise AssertionError(f"row {index} has {n} tokens, more than its bucket {batch.bucket}")
        input_ids[r, :n] = ids
        loss_mask[r, :n] = mask != 0
        lengths[r] = n
        if doc_ids is not None:
            doc_ids[r, :n] = ds.doc_ids(index)  # same length as ids: checked when the data opened
    return TokenBatch(
        seq=seq,
        epoch=epoch,
        bucket=batch.bucket,
        indices=batch.indices,
        input_ids=torch.from_numpy(input_ids),
        loss_mask=torch.from_numpy(loss_mask),
        lengths=torch.from_numpy(lengths),
        doc_ids=None if doc_ids is None else torch.from_numpy(doc_ids),
    )
