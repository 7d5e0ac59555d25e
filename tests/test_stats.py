"""Claims about the trial statistics, checked against closed forms and published values."""

from __future__ import annotations

import math

import pytest

from harness import stats


def _wilson_closed_form(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (3, 29), (0, 1), (7, 200)])
def test_wilson_matches_the_closed_form(k, n):
    got = stats.wilson(k, n)
    low, high = _wilson_closed_form(k, n)
    assert got.low == pytest.approx(max(low, 0.0), abs=1e-9)
    assert got.high == pytest.approx(min(high, 1.0), abs=1e-9)


def test_wilson_is_scipys_wilson_interval():
    from scipy.stats import binomtest  # scipy's own interval to check against; its import takes seconds

    for n in (1, 2, 3, 7, 10, 29, 100):
        for k in range(n + 1):
            ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            got = stats.wilson(k, n)
            assert got.low == pytest.approx(max(float(ref.low), 0.0), abs=1e-12), (k, n)
            assert got.high == pytest.approx(min(float(ref.high), 1.0), abs=1e-12), (k, n)


def test_wilson_zero_of_ten_upper_bound_is_the_published_value():
    # 0/10 -> Wilson 95% upper bound 0.2775 (Newcombe 1998, table I).
    assert stats.wilson(0, 10).high == pytest.approx(0.2775, abs=1e-4)


def test_wilson_without_runs_knows_nothing():
    assert stats.wilson(0, 0) == stats.Interval(low=0.0, high=1.0)


@pytest.mark.parametrize("k,n", [(-1, 3), (4, 3), (0, -1)])
def test_wilson_rejects_impossible_counts(k, n):
    with pytest.raises(ValueError):
        stats.wilson(k, n)


def test_rule_of_three_is_three_over_n_and_close_to_the_exact_bound():
    assert stats.rule_of_three(30) == pytest.approx(0.1)
    assert stats.rule_of_three(2) == 1.0
    # The approximation is within 5% of the exact bound for n >= 30.
    assert stats.exact_zero_failure_bound(30) == pytest.approx(0.0950, abs=2e-4)
    with pytest.raises(ValueError):
        stats.rule_of_three(0)


def test_trials_needed_for_ten_percent_at_95_is_29():
    assert stats.trials_needed(0.10) == 29
    assert 1 - 0.9**28 < 0.95 <= 1 - 0.9**29
    assert stats.trials_needed(1.0) == 1
    assert stats.trials_needed(0.5, confidence=0.75) == 2
    with pytest.raises(ValueError):
        stats.trials_needed(0.0)


def test_median_runs_to_first_failure_is_the_geometric_median():
    assert stats.median_runs_to_first_failure(1.0) == 1
    assert stats.median_runs_to_first_failure(0.5) == 1
    # p = 0.1: P(first failure within 6 runs) = 0.469 < 0.5 <= P(within 7) = 0.522.
    assert stats.median_runs_to_first_failure(0.1) == 7


def test_median_time_to_first_failure_adds_passing_runs_before_the_failing_one():
    # p = 1/4 -> median 3 runs: 2 passing runs (mean 1 s) + one failing run (2 s).
    got = stats.median_time_to_first_failure([1.0, 1.0, 2.0, 1.0], [False, False, True, False])
    assert got == pytest.approx(4.0)
    assert stats.median_time_to_first_failure([3.0, 5.0], [True, True]) == pytest.approx(4.0)
    assert stats.median_time_to_first_failure([1.0, 1.0], [False, False]) is None


@pytest.mark.parametrize("n, k, coverage", [(3, 1, 0.75), (5, 1, 0.9375), (6, 1, 0.96875), (10, 2, 0.978515625)])
def test_the_median_interval_is_the_sign_tests_order_statistics(n, k, coverage):
    iv = stats.median_interval([float(x) for x in reversed(range(1, n + 1))])
    assert (iv.low, iv.high) == (float(k), float(n + 1 - k)) and iv.coverage == pytest.approx(coverage)
    assert iv.median == (n + 1) / 2


def test_the_median_interval_of_one_draw_covers_nothing_and_of_none_is_none():
    assert stats.median_interval([]) is None
    one = stats.median_interval([1.07])
    assert (one.low, one.median, one.high, one.coverage) == (1.07, 1.07, 1.07, 0.0)
