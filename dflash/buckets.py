"""Length buckets, and how each bucket is cut into batches under a token budget.

Algorithm (`plan_epoch`): each sample goes to the smallest bucket whose (inclusive) upper bound
holds it. Samples are shuffled within their bucket and cut into batches by one of two rules
(`data.batching`), and the batches of all buckets are shuffled together.
- `fixed`: bucket b's batch size is `token_budget // b`, so every batch pads to at most
  `token_budget` tokens; the last batch of a bucket may be smaller.
- `token-budget`: rows are taken in shuffled order while the sum of their REAL lengths stays
  within `token_budget` and there are at most `max_batch_rows` of them; the next row opens a new
  batch. Batch sizes then follow the data and the shuffle, and so does the number of batches a
  bucket gets (the seeds' trainer: 27,881 and 27,889 batches in its last bucket on two launches).

Why the sum of real lengths and not rows x longest: the DFlash trainer that batches by a token
budget (speculators' MultipackDistributedBatchSamplerV2, after imoneoi/multipack_sampler) counts
each sample's real tokens against `total_seq_len`; SpecForge and TorchSpec use a fixed batch and pad
to its longest row, with no budget at all. Real tokens are what the budget should bound: the
target's prefill and the context K/V the drafter attends to grow with them (the anchors, fixed per
row, set the rest). The seeds' logged figures (dflash/seeds.py) do not say which rule they used.
`collate` still pads a batch to its bucket bound, so the padded tensor (rows x bound) may exceed the
budget by up to the bucket's width.

The plan reads only the lengths (the list offsets of the Arrow data, `TokenDataset.lengths`);
no token is touched and nothing is copied but an index per sample.

Properties (tested with Hypothesis in tests/test_buckets.py):
- every sample appears exactly once per epoch;
- fixed: `len(batch.indices) * batch.bucket <= token_budget`; token-budget: the real lengths of a
  batch sum to at most `token_budget`, it has at most `max_batch_rows` rows, and a batch closed
  early was closed because the next row did not fit;
- the plan is a pure function of its arguments: the same (seed, epoch) gives the same plan on any
  machine (numpy PCG64 seeded through SeedSequence([seed, epoch]) is stable across numpy versions),
  a different epoch gives a different order. So any number of prefetch threads agree on `seq`.

Bucketing by length with a batch size per bucket follows NeMo speech's `bucket_duration_bins` /
`bucket_batch_size`; DFlash trainers pack (speculators) or pad a fixed batch (SpecForge) instead.
Few distinct shapes also bound the number of torch.compile recompiles (one per bucket with
dynamic=False under `fixed`; a token-budget plan has up to `max_batch_rows` row counts per bucket).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from dflash.config import BATCHING_RULES
from dflash.trainer_errors import DataError


@dataclass(frozen=True, slots=True)
class Batch:
    bucket: int
    """Upper bound of the bucket = padded length of the batch."""
    indices: tuple[int, ...]
    """Dataset rows, in the (shuffled) order they are collated."""


def bucket_of(lengths: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """Index of the smallest bucket holding each length; DataError for a sample that fits none."""
    lengths = np.asarray(lengths, dtype=np.int64)
    bounds = np.asarray(boundaries, dtype=np.int64)
    which = np.searchsorted(bounds, lengths, side="left")
    too_long = np.flatnonzero(which >= len(bounds))
    if too_long.size:
        row = int(too_long[0])
        raise DataError(
            f"row {row} has length {int(lengths[row])} > largest bucket {int(bounds[-1])} "
            f"({too_long.size} such rows); raise data.bucket_boundaries or drop long samples"
        )
    return which


def _check_args(boundaries: Sequence[int], token_budget: int, batching: str, max_batch_rows: int) -> None:
    if not boundaries or list(boundaries) != sorted(set(boundaries)) or boundaries[0] <= 0:
        raise ValueError(f"bucket boundaries must be positive and strictly increasing, got {tuple(boundaries)}")
    if token_budget < boundaries[-1]:
        raise ValueError(f"token_budget {token_budget} cannot hold one sample of bucket {boundaries[-1]}")
    if batching not in BATCHING_RULES:
        raise ValueError(f"batching must be one of {BATCHING_RULES}, got {batching!r}")
    if max_batch_rows < 1:
        raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")


def fill(lengths: np.ndarray, token_budget: int, max_rows: int) -> np.ndarray:
    """End (exclusive) of each token-budget batch over rows taken in the given order.

    A batch takes rows while their lengths sum to at most `token_budget` and there are at most
    `max_rows` of them; a row longer than the budget alone still gets a batch of its own.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = int(lengths.size)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])  # starts[i] = tokens before row i
    here = np.arange(n)
    # For every row i: where a batch opened at i would end. One vectorised search, then a walk
    # over the batches only (60k for 1.1M samples), not over the rows.
    ends = np.searchsorted(starts, starts[:-1] + token_budget, side="right") - 1
    ends = np.maximum(np.minimum(ends, here + max_rows), here + 1).tolist()
    out, i = [], 0
    while i < n:
        i = ends[i]
        out.append(i)
    return np.array(out, dtype=np.int64)


def _cut(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    token_budget: int,
    rng: np.random.Generator,
    batching: str,
    max_batch_rows: int,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per bucket: (bound, its rows in shuffled order, the end of each batch in that order)."""
    which = bucket_of(lengths, boundaries)
    cuts = []
    for b, bound in enumerate(boundaries):
        rows = rng.permutation(np.flatnonzero(which == b))  # drawn for an empty bucket too
        if batching == "fixed":
            size = token_budget // bound
            ends = np.arange(size, rows.size + size, size).clip(max=rows.size)
        else:
            ends = fill(lengths[rows], token_budget, max_batch_rows)
        cuts.append((int(bound), rows, ends))
    return cuts


def plan_epoch(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    token_budget: int,
    seed: int,
    epoch: int,
    *,
    batching: str = "fixed",
    max_batch_rows: int = 64,
) -> list[Batch]:
    """The batches of one epoch, in order (see the module docstring)."""
    _check_args(boundaries, token_budget, batching, max_batch_rows)
    rng = np.random.default_rng([seed, epoch])
    batches: list[Batch] = []
    for bound, rows, ends in _cut(
        np.asarray(lengths, dtype=np.int64), boundaries, token_budget, rng, batching, max_batch_rows
    ):
        order, starts = rows.tolist(), [0, *ends.tolist()]
        batches.extend(Batch(bucket=bound, indices=tuple(order[s:e])) for s, e in pairwise(starts))
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def batch_sizes(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    token_budget: int,
    seed: int,
    epoch: int,
    *,
    batching: str = "fixed",
    max_batch_rows: int = 64,
) -> list[np.ndarray]:
    """Per bucket, the sizes of the batches `plan_epoch` cuts it into (same arguments, same
    cut), without building the batches: what a sweep over budgets needs."""
    _check_args(boundaries, token_budget, batching, max_batch_rows)
    rng = np.random.default_rng([seed, epoch])
    return [
        np.diff(ends, prepend=0)
        for _, _, ends in _cut(
            np.asarray(lengths, dtype=np.int64), boundaries, token_budget, rng, batching, max_batch_rows
        )
    ]


def max_rows(boundaries: Sequence[int], token_budget: int, batching: str, max_batch_rows: int) -> int:
    """The most rows any batch of a plan can have (the row count a one-shape run pads to)."""
    return token_budget // boundaries[0] if batching == "fixed" else max_batch_rows


def summarize(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    token_budget: int,
    *,
    batching: str = "fixed",
    max_batch_rows: int = 64,
) -> str:
    """Human-readable bucket statistics: samples, batches per epoch, per-bucket counts and shares."""
    plan = plan_epoch(
        lengths, boundaries, token_budget, seed=0, epoch=0, batching=batching, max_batch_rows=max_batch_rows
    )
    which = bucket_of(lengths, boundaries)
    total = int(len(which))
    sizes = [len(b.indices) for b in plan]
    lines = [f"samples loaded: {total}"]
    if sizes:
        lines.append(
            f"batches per epoch: {len(plan)} (batch size min {min(sizes)}, max {max(sizes)}, "
            f"avg {sum(sizes) / len(sizes):.1f})"
        )
    else:
        lines.append("batches per epoch: 0")
    for b, bound in enumerate(boundaries):
        count = int(np.count_nonzero(which == b))
        share = 100.0 * count / total if total else 0.0
        mine = [len(batch.indices) for batch in plan if batch.bucket == bound]
        if batching == "fixed":
            of = f"of {token_budget // bound}"
        else:
            of = f"of {min(mine)}-{max(mine)} rows (avg {sum(mine) / len(mine):.1f})" if mine else "of 0 rows"
        lines.append(f"bucket <={bound}: {count} samples ({share:.1f}%), {len(mine)} batches {of}")
    return "\n".join(lines)
