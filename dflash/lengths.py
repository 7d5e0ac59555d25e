"""Length indexes for planning: the shipped synthetic one, one read from a file, and the token
budget that gives a chosen average batch over one of them.

The shipped index (`shipped_lengths`) stands in for the seeds' 1,095,082 samples, whose lengths
their log did not give. It is generated, not stored: per bucket, `SHIPPED_BUCKET_SAMPLES` draws of
a lognormal truncated to the bucket, then shuffled, numpy PCG64 seeded with `SHIPPED_SEED`, in
about a second (tests/test_plan.py holds it under a few), so the same index comes back on any
machine and nothing is stored or cached.

The lognormal gives the shape of the lengths inside each bucket. Its two parameters come from the
seeds' bucket layout: six buckets spread over the samples put the end of the first bucket (770)
near the 1/6 quantile and the start of the last (3296) near the 5/6 quantile; two quantiles fix a
lognormal: mu is the mean of their logs (median about 1593 tokens) and sigma is half the distance
of their logs over z(5/6) (about 0.75). Lengths are rounded to whole tokens.

How many samples each bucket holds is fitted (`fit_bucket_samples`): the lognormal alone put
37.4% of the batches in the last bucket where the seeds had 46.6%, because long samples make
small batches and the plain lognormal has too few of them. The fit moves samples between buckets
until the seed-0 epoch-0 plan, at the budget that averages the seeds' 18.3 samples a batch, has
the seeds' share of batches in every bucket and their batch count. Those two figures are then
matched by construction, not checked; what stays a check against the seeds' logged figures
(dflash/seeds.py) is the smallest and largest batch and the last bucket's batch count per launch.

`calibrate_budget` picks a token budget for a target average batch size by bisection over
multiples of `BUDGET_QUANTUM` (the average grows with the budget); the `seeds` preset's budget is
its answer for the shipped index and the seeds' 18.3 (tests/test_plan.py checks it still is).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from dflash.buckets import batch_sizes
from dflash.data import open_dataset
from dflash.seeds import SEEDS
from dflash.trainer_errors import DataError

SHIPPED_SAMPLES = SEEDS.samples
SHIPPED_SEED = 0
MAX_LENGTH = SEEDS.max_length()
_Z = NormalDist().inv_cdf(5 / 6)
_LO, _HI = math.log(SEEDS.upper_bounds[0]), math.log(SEEDS.upper_bounds[-2])
LOG_MU = (_LO + _HI) / 2
"""Mean of log(length): the seeds' 770 and 3296 as the 1/6 and 5/6 quantiles (module docstring)."""
LOG_SIGMA = (_HI - _LO) / (2 * _Z)
"""Standard deviation of log(length), from the same two quantiles."""
BUDGET_QUANTUM = 256
"""Token budgets are searched in these steps: finer would claim a precision the stand-in lacks."""


SHIPPED_BUCKET_SAMPLES = (145_615, 191_349, 183_189, 184_994, 147_783, 242_152)
"""Samples per seeds' bucket in the shipped index: `fit_bucket_samples()`'s answer (its seed-0
epoch-0 plan at SEEDS_TOKEN_BUDGET: 59,830 batches, shares 3.8/7.4/10.5/15.0/16.6/46.6%)."""


def synthetic_lengths(
    samples: int = SHIPPED_SAMPLES,
    *,
    seed: int = SHIPPED_SEED,
    mu: float = LOG_MU,
    sigma: float = LOG_SIGMA,
    max_length: int = MAX_LENGTH,
) -> np.ndarray:
    """[samples] int64 lengths: round(exp(N(mu, sigma))), draws outside [1, max_length] redrawn."""
    rng = np.random.default_rng([seed, 0x4C454E53])  # a stream of its own ("LENS")
    parts, have = [], 0
    while have < samples:
        # Draw a little more than the truncation drops; a short draw just loops once more.
        x = np.rint(np.exp(rng.normal(mu, sigma, size=int((samples - have) * 1.05) + 1024)))
        kept = x[(x >= 1) & (x <= max_length)].astype(np.int64)[: samples - have]
        parts.append(kept)
        have += kept.size
    out = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    out.setflags(write=False)
    return out


def bucketed_lengths(
    counts: Sequence[int],
    boundaries: Sequence[int],
    *,
    seed: int = SHIPPED_SEED,
    mu: float = LOG_MU,
    sigma: float = LOG_SIGMA,
) -> np.ndarray:
    """counts[b] lengths per bucket b (inclusive upper `boundaries`, the first from 1), each drawn
    as round(exp(N(mu, sigma))) and redrawn until it falls in its bucket; then shuffled."""
    rng = np.random.default_rng([seed, 0x4C454E53])  # a stream of its own ("LENS")
    parts = []
    for lo, hi, n in zip([1, *(b + 1 for b in boundaries[:-1])], boundaries, counts, strict=True):
        have = 0
        while have < n:
            x = np.rint(np.exp(rng.normal(mu, sigma, size=2 * (n - have) + 1024)))
            kept = x[(x >= lo) & (x <= hi)].astype(np.int64)[: n - have]
            parts.append(kept)
            have += kept.size
    out = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    out = out[rng.permutation(out.size)]
    out.setflags(write=False)
    return out


def shipped_lengths() -> np.ndarray:
    """The shipped length index (module docstring): the stand-in for the seeds' samples."""
    return bucketed_lengths(SHIPPED_BUCKET_SAMPLES, SEEDS.bucket_boundaries())


def fit_bucket_samples(iterations: int = 8) -> tuple[tuple[int, ...], int]:
    """(samples per bucket, token budget) whose seed-0 epoch-0 plan comes nearest the seeds' batch
    shares and batch count: start from the lognormal's own bucket masses; each round calibrates
    the budget to the seeds' average batch, reads each bucket's average batch a_b, and asks for
    share_b x batches x a_b samples in bucket b (scaled to the seeds' sample count). Converges
    in about three rounds; later rounds move a few dozen samples (the draws' noise). About 5 s a
    round."""
    bounds = SEEDS.bucket_boundaries()
    plain = synthetic_lengths(seed=SHIPPED_SEED)
    which = np.searchsorted(np.asarray(bounds), plain, side="left")
    counts = np.rint(np.bincount(which, minlength=len(bounds)) * SEEDS.samples / plain.size).astype(np.int64)
    counts[-1] += SEEDS.samples - counts.sum()
    share = np.asarray(SEEDS.share_pct) / sum(SEEDS.share_pct)
    best: tuple[float, tuple[int, ...], int] | None = None
    for _ in range(iterations):
        lengths = bucketed_lengths(counts, bounds)
        budget = calibrate_budget(lengths, bounds, SEEDS.avg_batch, max_batch_rows=SEEDS.max_batch)
        sizes = batch_sizes(lengths, bounds, budget, 0, 0, batching="token-budget", max_batch_rows=SEEDS.max_batch)
        batches = np.array([s.size for s in sizes])
        miss = (np.abs(100 * batches / batches.sum() - 100 * share).max(), abs(int(batches.sum()) - SEEDS.batches))
        score = miss[0] + miss[1] / SEEDS.batches
        if best is None or score < best[0]:
            best = (score, tuple(int(c) for c in counts), budget)
        want = share * SEEDS.batches * counts / batches
        counts = np.rint(want * SEEDS.samples / want.sum()).astype(np.int64)
        counts[-1] += SEEDS.samples - counts.sum()
    assert best is not None
    return best[1], best[2]


def read_lengths(path: str) -> np.ndarray:
    """Lengths from `path`: a `.npy` 1-D integer array, or a tokenized dataset (anything
    `dflash.data.open_dataset` opens), whose lengths come from the list offsets without reading a
    token. DataError with one line for a missing or malformed file."""
    if not path.endswith(".npy"):
        return open_dataset(path).lengths
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: not a .npy length index ({first})") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise DataError(f"{path}: a length index is a 1-D integer array, got {arr.ndim}-D {arr.dtype}")
    if arr.size == 0:
        raise DataError(f"{path}: the length index is empty")
    lengths = np.asarray(arr, dtype=np.int64)
    if lengths.min() < 0:
        raise DataError(f"{path}: negative length {int(lengths.min())} at row {int(lengths.argmin())}")
    return lengths


def average_batch(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    token_budget: int,
    *,
    max_batch_rows: int,
    seed: int = 0,
    epoch: int = 0,
) -> float:
    """Samples per batch of one token-budget epoch plan."""
    sizes = batch_sizes(
        lengths, boundaries, token_budget, seed, epoch, batching="token-budget", max_batch_rows=max_batch_rows
    )
    return len(lengths) / sum(s.size for s in sizes)


def calibrate_budget(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    target_avg: float,
    *,
    max_batch_rows: int,
    seed: int = 0,
    epoch: int = 0,
) -> int:
    """The multiple of BUDGET_QUANTUM (at least the largest bound) whose token-budget plan of
    (seed, epoch) averages nearest `target_avg` samples a batch."""
    q = BUDGET_QUANTUM
    lo = -(-boundaries[-1] // q)  # smallest k with k * q >= the largest bound
    hi = lo
    avg = {}

    def at(k: int) -> float:
        if k not in avg:
            avg[k] = average_batch(lengths, boundaries, k * q, max_batch_rows=max_batch_rows, seed=seed, epoch=epoch)
        return avg[k]

    if at(lo) >= target_avg:
        return lo * q
    while at(hi) < target_avg:  # doubling, then bisection: at(lo) < target <= at(hi)
        lo, hi = hi, hi * 2
        if hi * q > len(lengths) * max(int(lengths.max()), 1):
            raise ValueError(f"no token budget reaches an average batch of {target_avg}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid) < target_avg else (lo, mid)
    return (hi if at(hi) - target_avg <= target_avg - at(lo) else lo) * q
