"""Statistics for repeated trials: each trial is a Bernoulli draw with unknown failure probability p.

- `wilson(k, n)`: Wilson score 95% interval (Wilson 1927), its closed form (scipy's `binomtest`
  `proportion_ci(method="wilson")` gives the same; importing scipy.stats costs a second, which a
  hunt's report paid); good coverage for small n and p near 0 or 1, unlike the Wald interval.
- `rule_of_three(n)`: with 0 failures in n runs the one-sided 95% upper bound is about 3/n
  (Eypasch et al., BMJ 1995); the exact bound is 1 - 0.05**(1/n).
- `trials_needed(p, confidence)`: runs needed to see at least one failure with that probability:
  ceil(ln(1 - confidence) / ln(1 - p)); 29 runs for p = 10% at 95%.
- `median_time_to_first_failure(...)`: runs to the first failure are geometric(p); see its docstring.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(kw_only=True, slots=True, frozen=True)
class Interval:
    low: float
    """Lower bound of the failure probability."""
    high: float
    """Upper bound of the failure probability."""


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for k failures in n runs; (0, 1) when n == 0 (nothing is known)."""
    _check_counts(k, n)
    if n == 0:
        return Interval(low=0.0, high=1.0)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # Clamped: rounding may leave -0.0 or 1.0000000000000002 at the edges.
    return Interval(low=min(max(centre - half, 0.0), 1.0), high=min(max(centre + half, 0.0), 1.0))


def rule_of_three(n: int) -> float:
    """Approximate one-sided 95% upper bound on p after 0 failures in n runs (3/n, capped at 1)."""
    if n <= 0:
        raise ValueError(f"rule of three needs n >= 1 runs, got {n}")
    return min(1.0, 3.0 / n)


def exact_zero_failure_bound(n: int, confidence: float = CONFIDENCE) -> float:
    """Exact one-sided upper bound after 0 failures in n runs: 1 - (1 - confidence)**(1/n)."""
    if n <= 0:
        raise ValueError(f"need n >= 1 runs, got {n}")
    return 1.0 - (1.0 - confidence) ** (1.0 / n)


def trials_needed(p: float, confidence: float = CONFIDENCE) -> int:
    """Smallest N with P(at least one failure in N runs) >= confidence, for per-run probability p."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if p == 1.0:
        return 1
    # Round before ceil so that exact cases (p=0.5, confidence=0.75 -> 2) are not pushed up by
    # floating-point noise in the logarithms.
    return max(1, math.ceil(round(math.log(1.0 - confidence) / math.log(1.0 - p), 9)))


def median_runs_to_first_failure(p: float) -> int:
    """Median of the geometric distribution of runs up to and including the first failure."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p == 1.0:
        return 1
    return max(1, math.ceil(round(math.log(0.5) / math.log(1.0 - p), 9)))


def median_time_to_first_failure(durations_s: Sequence[float], failed: Sequence[bool]) -> float | None:
    """Median serial wall time until the first failing run, estimated from observed runs.

    With p = k/n, runs to the first failure are geometric with median m; the estimate is
    (m - 1) passing runs of mean passing duration plus one failing run of mean failing duration
    (how long a failing run takes to fail). None when no run failed (no estimate exists; use the
    rule-of-three bound instead). Divide by the number of parallel workers for wall time.
    """
    if len(durations_s) != len(failed):
        raise ValueError("durations_s and failed must have the same length")
    fails = [d for d, f in zip(durations_s, failed) if f]
    if not fails:
        return None
    passes = [d for d, f in zip(durations_s, failed) if not f]
    m = median_runs_to_first_failure(len(fails) / len(durations_s))
    mean_pass = statistics.fmean(passes) if passes else 0.0
    return (m - 1) * mean_pass + statistics.fmean(fails)


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(kw_only=True, slots=True, frozen=True)
class MedianInterval:
    median: float
    low: float
    high: float
    coverage: float
    """Probability that [low, high] holds the true median (exact, for any continuous distribution)."""


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> MedianInterval | None:
    """Distribution-free interval for a median from n independent draws (the sign test's order
    statistics): [x_(k), x_(n+1-k)] holds the median with probability 1 - 2 P(Binomial(n, 1/2) <= k-1).
    The widest-k interval reaching `confidence`; with too few draws for it (n <= 5 at 95%) the full
    range, whose own coverage is returned (n = 3: 75%), so a caller can say how weak it is."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None

    def cover(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and cover(k + 1) >= confidence:
        k += 1
    return MedianInterval(median=statistics.median(xs), low=xs[k - 1], high=xs[n - k], coverage=max(0.0, cover(k)))
