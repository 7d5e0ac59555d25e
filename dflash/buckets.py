"""Length buckets with a per-bucket batch size under a fixed padded-token budget.

Algorithm (`plan_epoch`): each sample goes to the smallest bucket whose (inclusive) upper bound
holds it; the batch size of bucket b is `token_budget // b`, so every batch pads to at most
`token_budget` tokens. Samples are shuffled within their bucket, cut into batches (the last batch of
a bucket may be smaller), and the batches of all buckets are shuffled together.

Properties (tested with Hypothesis in tests/test_buckets.py):
- every sample appears exactly once per epoch;
- `len(batch.indices) * batch.bucket <= token_budget`;
- the plan is a pure function of its arguments: the same (seed, epoch) gives the same plan on any
  machine (numpy PCG64 seeded through SeedSequence([seed, epoch]) is stable across numpy versions),
  a different epoch gives a different order. So any number of prefetch threads agree on `seq`.

Bucketing by length with a batch size per bucket follows NeMo speech's `bucket_duration_bins` /
`bucket_batch_size`; DFlash trainers pack instead (dflash.md, section 3). Few distinct shapes also
bound the number of torch.compile recompiles (one per bucket with dynamic=False).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dflash.errors import DataError


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


def _check_args(boundaries: Sequence[int], token_budget: int) -> None:
    if not boundaries or list(boundaries) != sorted(set(boundaries)) or boundaries[0] <= 0:
        raise ValueError(f"bucket boundaries must be positive and strictly increasing, got {tuple(boundaries)}")
    if token_budget < boundaries[-1]:
        raise ValueError(f"token_budget {token_budget} cannot hold one sample of bucket {boundaries[-1]}")


def plan_epoch(
    lengths: np.ndarray, boundaries: Sequence[int], token_budget: int, seed: int, epoch: int
) -> list[Batch]:
    """The batches of one epoch, in order (see the module docstring)."""
    _check_args(boundaries, token_budget)
    which = bucket_of(lengths, boundaries)
    rng = np.random.default_rng([seed, epoch])
    batches: list[Batch] = []
    for b, bound in enumerate(boundaries):
        rows = rng.permutation(np.flatnonzero(which == b))
        size = token_budget // bound
        for start in range(0, rows.size, size):
            batches.append(Batch(bucket=int(bound), indices=tuple(int(r) for r in rows[start : start + size])))
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def summarize(lengths: np.ndarray, boundaries: Sequence[int], token_budget: int) -> str:
    """Human-readable bucket statistics: samples, batches per epoch, per-bucket counts and shares."""
    plan = plan_epoch(lengths, boundaries, token_budget, seed=0, epoch=0)
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
        num_batches = sum(1 for batch in plan if batch.bucket == bound)
        lines.append(
            f"bucket <={bound}: {count} samples ({share:.1f}%), {num_batches} batches of {token_budget // bound}"
        )
    return "\n".join(lines)
