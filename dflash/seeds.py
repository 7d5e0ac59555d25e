"""What the seeds' trainer logged about its batches: the figures the `seeds` preset is set against.

The seeds (the toolkit's first users) ran a real DFlash trainer on 1,095,082 samples with six
length buckets and a token budget; its log gave the figures below, and no others. Figures of a
second launch are kept beside the first where the log gave them: batch sizes depend on the data
and the shuffle, so they moved between launches.

Their buckets were written half-open, `[lo, hi)`; this trainer's `data.bucket_boundaries` are
inclusive upper bounds (`dflash.buckets.bucket_of`), so `[3296, 8193)` is the bound 8192.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SeedsLog:
    samples: int
    batches: int
    """Batches per epoch."""
    min_batch: tuple[int, ...]
    """Smallest batch, one figure per launch that logged it."""
    max_batch: int
    avg_batch: float
    upper_bounds: tuple[int, ...]
    """Exclusive upper bounds of the buckets, as the seeds wrote them; the first bucket starts at 0."""
    share_pct: tuple[float, ...]
    """Share of the batches per bucket, percent, to one decimal as logged."""
    last_bucket_batches: tuple[int, ...]
    """Batches of the last bucket, one figure per launch."""

    def bucket_boundaries(self) -> tuple[int, ...]:
        """The same buckets as this trainer's inclusive upper bounds (lengths are integers)."""
        return tuple(hi - 1 for hi in self.upper_bounds)

    def max_length(self) -> int:
        """The longest sample their buckets held."""
        return self.upper_bounds[-1] - 1


SEEDS = SeedsLog(
    samples=1_095_082,
    batches=59_828,
    min_batch=(2, 6),
    max_batch=64,
    avg_batch=18.3,
    upper_bounds=(770, 1216, 1728, 2432, 3296, 8193),
    share_pct=(3.8, 7.4, 10.5, 15.0, 16.6, 46.6),
    last_bucket_batches=(27_881, 27_889),
)
