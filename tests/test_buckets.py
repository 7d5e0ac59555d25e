"""Properties of the epoch plan under both batching rules (Hypothesis) and the bucket summary."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash.buckets import Batch, batch_sizes, bucket_of, fill, plan_epoch, summarize
from dflash.trainer_errors import DataError


@st.composite
def plans(draw, min_samples: int = 1):
    bounds = sorted(draw(st.sets(st.integers(1, 300), min_size=1, max_size=5)))
    budget = draw(st.integers(bounds[-1], 4 * bounds[-1] + 64))
    lengths = draw(st.lists(st.integers(0, bounds[-1]), min_size=min_samples, max_size=300))
    seed = draw(st.integers(0, 2**32 - 1))
    epoch = draw(st.integers(0, 1000))
    return np.array(lengths, dtype=np.int64), tuple(bounds), budget, seed, epoch


@settings(max_examples=150, deadline=None)
@given(plans())
def test_every_sample_appears_exactly_once_per_epoch(args) -> None:
    lengths, bounds, budget, seed, epoch = args
    seen = [i for b in plan_epoch(lengths, bounds, budget, seed, epoch) for i in b.indices]
    assert sorted(seen) == list(range(len(lengths)))


@settings(max_examples=150, deadline=None)
@given(plans())
def test_padded_tokens_fit_the_budget_and_samples_sit_in_the_smallest_bucket(args) -> None:
    lengths, bounds, budget, seed, epoch = args
    plan = plan_epoch(lengths, bounds, budget, seed, epoch)
    for batch in plan:
        assert 1 <= len(batch.indices) <= budget // batch.bucket
        assert len(batch.indices) * batch.bucket <= budget
        for i in batch.indices:
            assert lengths[i] <= batch.bucket
            smaller = [b for b in bounds if b < batch.bucket]
            assert not smaller or lengths[i] > smaller[-1]
    # Only the last batch of a bucket may be short: at most one short batch per bucket.
    for bound in bounds:
        short = [b for b in plan if b.bucket == bound and len(b.indices) < budget // bound]
        assert len(short) <= 1


@settings(max_examples=100, deadline=None)
@given(plans(min_samples=20))
def test_plan_is_a_pure_function_of_seed_and_epoch(args) -> None:
    lengths, bounds, budget, seed, epoch = args
    before = lengths.copy()
    first = plan_epoch(lengths, bounds, budget, seed, epoch)
    assert plan_epoch(lengths, bounds, budget, seed, epoch) == first
    assert np.array_equal(lengths, before)  # inputs are not modified
    # 20+ samples: the chance that two epochs give the same order is below 1 / 20!.
    assert plan_epoch(lengths, bounds, budget, seed, epoch + 1) != first


def test_plan_order_is_stable_across_runs_regression() -> None:
    # Pins the shuffle: a numpy or code change that alters it would silently change which batch a
    # resumed run sees at a given seq.
    lengths = np.array([5, 40, 7, 90, 33, 12, 64, 65, 1, 128])
    assert plan_epoch(lengths, (32, 64, 128), 256, seed=0, epoch=0) == [
        Batch(bucket=64, indices=(6, 4, 1)),
        Batch(bucket=128, indices=(9, 3)),
        Batch(bucket=32, indices=(5, 0, 2, 8)),
        Batch(bucket=128, indices=(7,)),
    ]
    epochs = {tuple(plan_epoch(lengths, (32, 64, 128), 256, seed=0, epoch=e)) for e in range(10)}
    assert len(epochs) > 5


def test_sample_longer_than_largest_bucket_names_row_and_length() -> None:
    with pytest.raises(DataError, match=r"row 2 has length 200 > largest bucket 128"):
        plan_epoch(np.array([10, 20, 200, 300]), (32, 64, 128), 512, seed=0, epoch=0)


def test_bucket_of_uses_inclusive_upper_bounds() -> None:
    assert bucket_of(np.array([0, 32, 33, 64, 65, 128]), (32, 64, 128)).tolist() == [0, 0, 1, 1, 2, 2]


def test_bad_boundaries_or_budget_are_rejected() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        plan_epoch(np.array([1]), (64, 32), 128, seed=0, epoch=0)
    with pytest.raises(ValueError, match="token_budget"):
        plan_epoch(np.array([1]), (32, 64), 32, seed=0, epoch=0)


def test_summarize_reports_counts_shares_and_batch_sizes() -> None:
    lengths = np.array([10] * 20 + [50] * 10 + [100] * 2)
    text = summarize(lengths, (32, 64, 128), 512)
    assert text.splitlines() == [
        "samples loaded: 32",
        "batches per epoch: 5 (batch size min 2, max 16, avg 6.4)",
        "bucket <=32: 20 samples (62.5%), 2 batches of 16",
        "bucket <=64: 10 samples (31.2%), 2 batches of 8",
        "bucket <=128: 2 samples (6.2%), 1 batches of 4",
    ]


def test_batch_is_hashable_and_comparable() -> None:
    assert Batch(bucket=32, indices=(1, 2)) == Batch(bucket=32, indices=(1, 2))
    assert len({Batch(bucket=32, indices=(1, 2)), Batch(bucket=32, indices=(1, 2))}) == 1


# --- batching=token-budget: rows filled by their real lengths, at most max_batch_rows a batch ---


@st.composite
def budget_plans(draw, min_samples: int = 1):
    lengths, bounds, budget, seed, epoch = draw(plans(min_samples))
    cap = draw(st.integers(1, 70))
    return lengths, bounds, budget, seed, epoch, cap


def _plan(lengths, bounds, budget, seed, epoch, cap):
    return plan_epoch(lengths, bounds, budget, seed, epoch, batching="token-budget", max_batch_rows=cap)


@settings(max_examples=150, deadline=None)
@given(budget_plans())
def test_token_budget_plan_holds_every_sample_exactly_once(args) -> None:
    lengths = args[0]
    seen = [i for b in _plan(*args) for i in b.indices]
    assert sorted(seen) == list(range(len(lengths)))


@settings(max_examples=150, deadline=None)
@given(budget_plans())
def test_token_budget_batches_fit_the_budget_and_the_row_cap(args) -> None:
    lengths, bounds, budget, _, _, cap = args
    for batch in _plan(*args):
        assert 1 <= len(batch.indices) <= cap
        assert sum(int(lengths[i]) for i in batch.indices) <= budget
        for i in batch.indices:
            assert lengths[i] <= batch.bucket
            smaller = [b for b in bounds if b < batch.bucket]
            assert not smaller or lengths[i] > smaller[-1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), max_size=200), st.integers(500, 2000), st.integers(1, 70))
def test_fill_closes_a_batch_only_when_the_next_row_does_not_fit(lengths, budget, cap) -> None:
    ends = fill(np.array(lengths, dtype=np.int64), budget, cap).tolist()
    assert ends == sorted(set(ends)) and (ends[-1] if ends else 0) == len(lengths)
    starts = [0, *ends[:-1]]
    for k, (s, e) in enumerate(zip(starts, ends)):
        assert sum(lengths[s:e]) <= budget and e - s <= cap
        if k < len(ends) - 1:  # closed early only because the cap or the next row stopped it
            assert e - s == cap or sum(lengths[s:e]) + lengths[e] > budget


@settings(max_examples=100, deadline=None)
@given(budget_plans(min_samples=20))
def test_token_budget_plan_is_a_pure_function_of_seed_and_epoch(args) -> None:
    lengths, bounds, budget, seed, epoch, cap = args
    before = lengths.copy()
    first = _plan(*args)
    assert _plan(*args) == first
    assert np.array_equal(lengths, before)
    assert _plan(lengths, bounds, budget, seed, epoch + 1, cap) != first


@settings(max_examples=100, deadline=None)
@given(budget_plans())
def test_batch_sizes_are_the_plans_without_building_it(args) -> None:
    lengths, bounds, budget, seed, epoch, cap = args
    plan = _plan(*args)
    sizes = batch_sizes(lengths, bounds, budget, seed, epoch, batching="token-budget", max_batch_rows=cap)
    for bound, mine in zip(bounds, sizes, strict=True):
        assert sorted(mine.tolist()) == sorted(len(b.indices) for b in plan if b.bucket == bound)


@st.composite
def spread_lengths(draw):
    """Lengths spread over [1, budget] in three buckets: enough rows that the fill's waste, and so
    the number of batches, depends on the order the shuffle puts them in."""
    budget = draw(st.integers(100, 2000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, budget + 1, size=draw(st.integers(200, 400)))
    return lengths, (budget // 3, 2 * budget // 3, budget), budget


@settings(max_examples=60, deadline=None)
@given(spread_lengths(), st.integers(0, 2**32 - 1), st.integers(0, 1000))
def test_other_shuffles_give_other_batch_counts_per_bucket(data, seed, epoch) -> None:
    # As the seeds' two launches (27,881 and 27,889 batches in their last bucket). Two shuffles
    # can tie, so eight epochs and eight seeds each must give more than one set of counts.
    lengths, bounds, budget = data

    def counts(s: int, e: int) -> tuple[int, ...]:
        return tuple(int(x.size) for x in batch_sizes(lengths, bounds, budget, s, e, batching="token-budget"))

    assert len({counts(seed, epoch + k) for k in range(8)}) > 1
    assert len({counts(seed + k, epoch) for k in range(8)}) > 1


def test_fixed_rule_ignores_the_row_cap() -> None:
    lengths = np.array([5, 40, 7, 90, 33, 12, 64, 65, 1, 128])
    assert plan_epoch(lengths, (32, 64, 128), 256, seed=0, epoch=0, max_batch_rows=1) == plan_epoch(
        lengths, (32, 64, 128), 256, seed=0, epoch=0
    )


def test_token_budget_plan_regression() -> None:
    # Pins the fill and the shuffle, as the fixed rule's regression test does.
    lengths = np.array([5, 40, 7, 90, 33, 12, 64, 65, 1, 128, 30, 30])
    assert _plan(lengths, (32, 64, 128), 128, 0, 0, 3) == [
        Batch(bucket=64, indices=(6,)),
        Batch(bucket=64, indices=(1, 4)),  # 40 + 33; 64 more would make 137 > 128
        Batch(bucket=32, indices=(8, 5, 11)),  # the row cap, 3, closes it at 43 tokens
        Batch(bucket=128, indices=(9,)),
        Batch(bucket=128, indices=(7,)),
        Batch(bucket=128, indices=(3,)),
        Batch(bucket=32, indices=(10, 0, 2)),
    ]


def test_summarize_token_budget_reports_the_range_of_batch_sizes() -> None:
    lengths = np.array([10] * 20 + [50] * 10 + [100] * 2)
    text = summarize(lengths, (32, 64, 96, 128), 512, batching="token-budget", max_batch_rows=16)
    assert text.splitlines() == [
        "samples loaded: 32",
        "batches per epoch: 4 (batch size min 2, max 16, avg 8.0)",
        "bucket <=32: 20 samples (62.5%), 2 batches of 4-16 rows (avg 10.0)",  # the 16-row cap
        "bucket <=64: 10 samples (31.2%), 1 batches of 10-10 rows (avg 10.0)",  # 500 of 512 tokens
        "bucket <=96: 0 samples (0.0%), 0 batches of 0 rows",
        "bucket <=128: 2 samples (6.2%), 1 batches of 2-2 rows (avg 2.0)",
    ]


def test_unknown_batching_rule_or_row_cap_is_rejected() -> None:
    with pytest.raises(ValueError, match="batching must be one of"):
        plan_epoch(np.array([1]), (32,), 32, seed=0, epoch=0, batching="packed")
    with pytest.raises(ValueError, match="max_batch_rows"):
        plan_epoch(np.array([1]), (32,), 32, seed=0, epoch=0, batching="token-budget", max_batch_rows=0)
