"""The recommendation rule: clean, >= 29 stressed trials, fastest; priced against the baselines."""

from harness.analysis import verdicts
from harness.analysis.summary import summarize
from harness.trial.outcome import Outcome, TrialResult


def _r(cell: str, i: int, outcome: Outcome = Outcome.OK, tok: float | None = None) -> TrialResult:
    return TrialResult(
        trial_id=f"m/{cell}/{i}",
        cell=cell,
        trial_index=i,
        outcome=outcome,
        signature="s" if outcome is not Outcome.OK else None,
        tokens_per_s=tok,
        duration_s=1.0,
        started_at="2026-11-29T10:00:00+00:00",
    )


def _cell(cell, n, *, k=0, tok=None):
    return [_r(cell, i, Outcome.CRASH if i < k else Outcome.OK, tok) for i in range(n)]


def _verdicts(records):
    return verdicts.recommend(summarize(records))


def test_the_fastest_clean_strategy_with_29_stressed_trials_is_recommended_and_priced():
    rs = (
        _cell("w:raw@-", 10, k=10)
        + _cell("w:raw@plan", 10, k=9)
        + _cell("w:a@-", 10, tok=300.0)
        + _cell("w:a@plan", 29, tok=250.0)
        + _cell("w:b@-", 10, tok=500.0)
        + _cell("w:b@plan", 29, k=1, tok=450.0)  # faster, not clean
        + _cell("w:c@-", 10, tok=900.0)
        + _cell("w:c@plan", 20, tok=800.0)  # clean, too few
        + _cell("w:global-lock@-", 10, tok=200.0)
        + _cell("w:eager@-", 10, tok=400.0)
    )
    (v,) = _verdicts(rs)
    assert [t.strategy for t in v.chosen] == ["a"]
    assert [t.strategy for t in v.short] == ["c"] and [t.strategy for t in v.failing] == ["b"]
    (line,) = verdicts.lines([v])
    assert "recommend `a`" in line and "0/39 failures (29 under a fault plan)" in line
    assert "300 tokens/s = 1.50x global-lock (200 tokens/s), 0.75x eager (400 tokens/s)" in line


def test_nothing_qualifies_is_said_with_the_evidence():
    rs = _cell("w:raw@plan", 5, k=5) + _cell("w:a@plan", 28, tok=1.0) + _cell("w:b@plan", 40, k=2, tok=1.0)
    (line,) = verdicts.lines(_verdicts(rs))
    assert line.startswith("w: no configuration qualifies")
    assert "`a` 0/28 (28 stressed)" in line and "`b` 2/40" in line


def test_baselines_are_never_recommended_and_a_failing_lock_is_flagged():
    rs = (
        _cell("w:global-lock@plan", 40, tok=100.0)
        + _cell("w:eager@plan", 40, tok=100.0)
        + _cell("w:global-lock@-", 5, k=1, tok=100.0)
        + _cell("w:a@-", 3, tok=150.0)
        + _cell("w:a@plan", 30, tok=120.0)
        + _cell("only-baselines:raw@-", 3)
    )
    found = _verdicts(rs)
    assert [v.workload for v in found] == ["w"]
    assert [t.strategy for t in found[0].chosen] == ["a"]
    (line,) = verdicts.lines(found)
    assert "and global-lock itself failed 1/45" in line


def test_without_throughput_every_qualifying_strategy_is_listed():
    rs = _cell("r:raw@plan", 29, k=29) + _cell("r:x@plan", 29) + _cell("r:y@plan", 30)
    (line,) = verdicts.lines(_verdicts(rs))
    assert line == "r: clean with >= 29 stressed trials: `x` (0/29, 29 stressed), `y` (0/30, 30 stressed)."


def test_a_lock_variant_can_win_and_the_concurrent_one_is_priced_against_it():
    # The H200 launch-bound shape (docs/log/2026-11-30-launch-bound-verdict.md): global-lock itself
    # never finished a trial, the no-cudagraphs lock variant and a lock-free one are both clean, the
    # lock variant faster.
    rs = (
        _cell("w:global-lock@-", 2, k=2)
        + _cell("w:eager@-", 8, tok=16661.0)
        + _cell("w:no-cudagraphs+global-lock@-", 2, tok=24897.0)
        + _cell("w:no-cudagraphs+global-lock@plan", 29, tok=19078.0)
        + _cell("w:no-cudagraphs+single-thread-autograd@-", 2, tok=23538.0)
        + _cell("w:no-cudagraphs+single-thread-autograd@plan", 29, tok=18537.0)
    )
    (v,) = _verdicts(rs)
    assert v.chosen[0].strategy == "no-cudagraphs+global-lock"
    assert v.concurrent.strategy == "no-cudagraphs+single-thread-autograd" and v.serial is v.chosen[0]
    (line,) = verdicts.lines([v])
    assert "24897 tokens/s = no global-lock figure (global-lock failed 2/2), 1.49x eager" in line
    assert (
        "Fastest clean concurrent configuration: `no-cudagraphs+single-thread-autograd` (0/31), 23538 "
        "tokens/s = 0.95x `no-cudagraphs+global-lock`: misses the 1.2x target."
    ) in line


def test_a_concurrent_winner_meets_the_target_against_the_plain_lock():
    rs = (
        _cell("w:global-lock@-", 5, tok=100.0)
        + _cell("w:global-lock@plan", 29, tok=90.0)
        + _cell("w:a@-", 5, tok=130.0)
        + _cell("w:a@plan", 29, tok=110.0)
    )
    (line,) = verdicts.lines(_verdicts(rs))
    assert "recommend `a`" in line and "1.30x global-lock (100 tokens/s)" in line
    assert "`a` (0/34), 130 tokens/s = 1.30x `global-lock`: meets the 1.2x target." in line


def test_when_only_lock_variants_qualify_that_is_the_finding():
    rs = (
        _cell("w:global-lock+x@-", 3, tok=100.0)
        + _cell("w:global-lock+x@plan", 29, tok=90.0)
        + _cell("w:a@plan", 29, k=1, tok=200.0)
        + _cell("w:b@plan", 10, tok=300.0)
    )
    (line,) = verdicts.lines(_verdicts(rs))
    assert "recommend `global-lock+x`" in line
    assert line.endswith(
        "No concurrent configuration qualifies (each failed or has under 29 stressed "
        "trials): on this workload only serialised compiled calls are clean."
    )
    assert verdicts.serialised("global-lock+x") and not verdicts.serialised("cudagraph-lock")


def test_a_priced_cell_whose_trials_spread_widely_is_named_with_its_range():
    rs = (
        _cell("w:a@plan", 29, tok=250.0)
        + _cell("w:a@-", 4, tok=300.0)
        + [_r("w:eager@-", i, tok=t) for i, t in enumerate([100.0, 200.0, 400.0])]
        + _cell("w:global-lock@-", 3, tok=200.0)
    )
    (line,) = verdicts.lines(_verdicts(rs))
    # eager's trials ran 100..400 (4x): named; a and the lock ran steady: not named.
    assert "Throughput spread over 1.5x between trials (`eager` 100-400 tokens/s)" in line
    (steady,) = verdicts.lines(
        _verdicts(_cell("w:a@plan", 29, tok=250.0) + _cell("w:a@-", 4, tok=300.0) + _cell("w:eager@-", 3, tok=200.0))
    )
    assert "spread" not in steady


def test_where_the_lock_is_the_only_fix_tried_it_is_judged_as_the_fix():
    # catalogue-cpu's r16: raw and global-lock only; the lock is the documented fix under test.
    held = _verdicts(
        _cell("r16:raw@reset", 10, k=6) + _cell("r16:global-lock@-", 1) + _cell("r16:global-lock@reset", 29)
    )
    assert verdicts.lines(held) == ["r16: clean with >= 29 stressed trials: `global-lock` (0/30, 29 stressed)."]
    short = _verdicts(_cell("r16:raw@reset", 10, k=6) + _cell("r16:global-lock@reset", 10))
    assert "clean so far: `global-lock` 0/10 (10 stressed)" in verdicts.lines(short)[0]
    # Raw alone is still no verdict, and where other fixes were tried the lock stays a baseline.
    assert _verdicts(_cell("r16:raw@reset", 10, k=6)) == []
    (v,) = _verdicts(_cell("w:global-lock@p", 29) + _cell("w:a@p", 29))
    assert [t.strategy for t in v.chosen] == ["a"] and v.lock is not None


def test_the_recommendation_carries_its_cost_alone_on_the_gpu_per_benched_run():
    from harness.analysis.bench_records import Bench

    def bench(host_run, strategy, tok):
        return Bench(
            host_run=host_run,
            preset="w",
            strategy=strategy,
            steps=60,
            tokens_steady=tok,
            gpu_busy=None,
            gpu_busy_steady=None,
            busy={},
            torch="2.11",
        )

    rs = (
        _cell("w:global-lock+x@-", 2, tok=300.0)
        + _cell("w:global-lock+x@plan", 29, tok=250.0)
        + _cell("w:y@-", 2, tok=280.0)
        + _cell("w:y@plan", 29, tok=240.0)
        + _cell("w:eager@-", 3, tok=200.0)
    )
    runs = [
        bench(9, "global-lock+x", 400.0),
        bench(9, "eager", 320.0),
        bench(9, "y", 380.0),
        bench(11, "global-lock+x", 330.0),
        bench(11, "y", 300.0),
        bench(11, "z", 999.0),
        Bench(
            host_run=9,
            preset="other",
            strategy="global-lock+x",
            steps=60,
            tokens_steady=1.0,
            gpu_busy=None,
            gpu_busy_steady=None,
            busy={},
            torch="2.11",
        ),
    ]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs)
    assert line.endswith(
        "Alone on the GPU (`dflash bench`, steady half): run 9: 400 tokens/s, 1.25x eager, "
        "`y` 0.95x it; run 11: 330 tokens/s, `y` 0.91x it."
    )
    assert "Alone" not in verdicts.lines(_verdicts(rs))[0]


def _bench(host_run, strategy, tok, busy=None):
    from harness.analysis.bench_records import Bench

    return Bench(
        host_run=host_run,
        preset="w",
        strategy=strategy,
        steps=60,
        tokens_steady=tok,
        gpu_busy=None,
        gpu_busy_steady=busy,
        busy={},
        torch="2.11",
    )


def test_eager_clean_at_29_stressed_is_recommended_when_no_compiled_configuration_qualifies():
    # The H200 gpu-bound shape (torch 2.11, 2026-12-01): eager 0/38 (34 stressed), the two
    # no-cudagraphs cells clean but short, every CUDA-graph cell failing, compiled slower alone.
    rs = (
        _cell("w:eager@-", 4, tok=30148.0)
        + _cell("w:eager@plan", 34, tok=23666.0)
        + _cell("w:global-lock@-", 2, k=2)
        + _cell("w:no-cudagraphs+global-lock@plan", 19, tok=22435.0)
        + _cell("w:no-cudagraphs+global-lock@-", 3, tok=9980.0)
        + _cell("w:raw@-", 1, k=1)
    )
    runs = [_bench(15, "eager", 47798.0, 0.9851), _bench(15, "no-cudagraphs+global-lock", 40957.0)]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs)
    assert line.startswith(
        "w: recommend `eager` (do not compile): 0/38 failures (34 under a fault plan), "
        "the fastest clean cell, 30148 tokens/s in the matrix = no global-lock figure "
        "(global-lock failed 2/2); alone on the GPU (run 15, steady half) 47798 "
        "tokens/s, GPU busy 99%; no compiled configuration qualifies"
    )
    assert "`no-cudagraphs+global-lock` (0/22, 19 stressed) 0.86x eager (alone on the GPU, run 15)" in line
    assert line.endswith("failing: none.")  # the baselines (raw, global-lock) are not candidates
    # Eager short of 29 stressed trials is no recommendation: the old verdict stands.
    (short,) = verdicts.lines(_verdicts(_cell("w:eager@plan", 28, tok=1.0) + _cell("w:a@plan", 5, tok=1.0)))
    assert short.startswith("w: no configuration qualifies")


def test_eager_beats_a_qualifying_compiled_strategy_only_when_it_is_faster_alone():
    rs = _cell("w:eager@plan", 29, tok=200.0) + _cell("w:a@plan", 29, tok=100.0) + _cell("w:a@-", 3, tok=150.0)
    # By the matrix's medians eager (200) beats a (150) ...
    (line,) = verdicts.lines(_verdicts(rs))
    assert (
        line.startswith("w: recommend `eager`")
        and "clean compiled configurations are slower: `a` (0/32) 0.75x eager (campaign medians)." in line
    )
    # ... but a bench alone where both ran outranks the medians, the latest run first.
    runs = [
        _bench(3, "a", 100.0),
        _bench(3, "eager", 300.0),
        _bench(5, "a", 330.0),
        _bench(5, "eager", 300.0),
        _bench(6, "a", 999.0),
    ]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs)
    assert line.startswith("w: recommend `a`")
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs[:2])
    assert line.startswith("w: recommend `eager`") and "`a` (0/32) 0.33x eager (alone on the GPU, run 3)" in line


def test_a_strategy_that_died_in_a_bench_is_ruled_out_though_its_cells_are_clean():
    # H200 runs 24-26 (2026-12-01): the lock-free CUDA-graph cell 0/29 stressed, then
    # F2 in a bench alone on the GPU; the lock cell beside it clean in both.
    from dataclasses import replace

    rs = (
        _cell("w:global-lock+x@-", 2, tok=300.0)
        + _cell("w:global-lock+x@plan", 29, tok=250.0)
        + _cell("w:y@-", 2, tok=330.0)
        + _cell("w:y@plan", 29, tok=260.0)
        + _cell("w:eager@-", 3, tok=200.0)
    )
    died = replace(_bench(26, "y", None), exit_code=1, signature="fx-trace-of-dynamo-fn (RuntimeError ...)")
    slow = replace(_bench(26, "global-lock+x", None), exit_code=124, signature="timed out (exit 124)")
    elsewhere = replace(died, preset="other")
    (v,) = verdicts.recommend(summarize(rs), bench_runs=[died, slow, elsewhere])
    assert [t.strategy for t in v.chosen] == ["global-lock+x"] and [t.strategy for t in v.failing] == ["y"]
    (line,) = verdicts.lines([v], bench_runs=[died, slow])
    assert "recommend `global-lock+x`" in line and "No concurrent configuration qualifies" in line
    assert line.endswith(
        "Clean in the matrix but died alone on the GPU, so not recommended: `y` (0/31; "
        "run 26: fx-trace-of-dynamo-fn (RuntimeError ...))."
    )
    # Without the benches the faster lock-free cell wins, as it did before the bench died.
    (v,) = verdicts.recommend(summarize(rs))
    assert [t.strategy for t in v.chosen] == ["y"]


def _launch_bound_cells():
    """The H200 launch-bound campaign's shape: the plain lock fails, the lock cell (global-lock+x),
    the no-cudagraphs lock and the lock-free cell (y) are clean, with their campaign medians."""
    return (
        _cell("w:global-lock@-", 2, k=2)
        + _cell("w:eager@-", 8, tok=16661.0)
        + _cell("w:global-lock+x@-", 10, tok=28887.0)
        + _cell("w:global-lock+x@plan", 29, tok=29225.0)
        + _cell("w:no-cudagraphs+global-lock@-", 2, tok=24897.0)
        + _cell("w:no-cudagraphs+global-lock@plan", 29, tok=19078.0)
        + _cell("w:y@-", 10, tok=27455.0)
        + _cell("w:y@plan", 29, tok=22315.0)
    )


def test_a_strategy_benched_twice_in_a_run_is_priced_by_the_median_and_judged_alone():
    # H200 run 30's shape (2026-12-01): the lock cell and the lock-free one each benched
    # twice in opposite orders, the no-cudagraphs lock once; in the campaign the lock-free one ran
    # 0.95x the lock, alone 1.07x: the bench decides the target, and neither reaches 1.2x.
    rs = _launch_bound_cells()
    runs = [
        _bench(30, "y", 34467.0),
        _bench(30, "global-lock+x", 35841.0),
        _bench(30, "no-cudagraphs+global-lock", 27608.0),
        _bench(30, "eager", 25617.0),
        _bench(30, "global-lock+x", 30406.0),
        _bench(30, "y", 36116.0),
    ]
    (v,) = _verdicts(rs)
    assert [t.strategy for t in v.qualified] == ["global-lock+x", "no-cudagraphs+global-lock", "y"]
    (line,) = verdicts.lines([v], bench_runs=runs)
    assert (
        "Fastest clean concurrent configuration: `y` (0/39), 27455 tokens/s = 0.95x `global-lock+x` "
        "(campaign medians), 1.07x alone on the GPU, run 30: misses the 1.2x target."
    ) in line
    assert line.endswith(
        "run 30: 33124 tokens/s (median of 2 benches), 1.29x eager, 1.20x `no-cudagraphs+global-lock`, `y` 1.07x it."
    )
    # The latest run that benched both decides: one where y runs 1.21x the lock meets the target.
    (fast,) = verdicts.lines(
        _verdicts(rs), bench_runs=[*runs, _bench(31, "y", 40000.0), _bench(31, "global-lock+x", 33000.0)]
    )
    assert "1.21x alone on the GPU, run 31: meets the 1.2x target." in fast


def test_a_price_run_is_read_by_its_paired_rounds_not_by_the_ratio_of_medians():
    # H200 run 35's shape (2026-12-01): `harness price` benched the lock cell, the
    # lock-free one and the no-cudagraphs lock in 3 rounds; the lock cell's second round ran fast.
    # The medians say 40818 / 38150 = 1.07x; the rounds say 1.00x, 1.31x, 1.19x: 1.19x.
    from dataclasses import replace

    rs = _launch_bound_cells()
    figures = {
        "global-lock+x": (39890.0, 49826.0, 40818.0),
        "y": (45116.0, 43156.0, 38953.0),
        "no-cudagraphs+global-lock": (39781.0, 38150.0, 34324.0),
    }
    runs = [replace(_bench(35, s, tok[r]), round=r, run="t0") for r in range(3) for s, tok in figures.items()]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs)
    assert (
        "`y` (0/39), 27455 tokens/s = 0.95x `global-lock+x` (campaign medians), 0.95x alone on the GPU, "
        "run 35, 3 paired rounds: misses the 1.2x target." in line
    )
    assert line.endswith(
        "run 35 (ratios: medians over 3 paired rounds): 40818 tokens/s (median of 3 benches), "
        "1.19x `no-cudagraphs+global-lock`, `y` 0.95x it."
    )
    # Benches of two price runs in one host run do not pair across them: the ratio of the medians again.
    other = [replace(b, run="t1") if b.strategy == "y" else b for b in runs]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=other)
    assert "1.06x alone on the GPU, run 35: misses" in line
    # Two runs that both paired them are not pooled: the latest run decides (y 2x the lock there).
    later = [replace(b, run="t9", tokens_steady=b.tokens_steady * (2 if b.strategy == "y" else 1)) for b in runs]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=[*runs, *later])
    assert "1.91x alone on the GPU, run 35, 3 paired rounds: meets the 1.2x target." in line


def test_eager_alone_is_the_median_of_the_runs_benches():
    rs = _cell("w:eager@plan", 29, tok=200.0) + _cell("w:a@plan", 3, tok=150.0)
    runs = [
        _bench(34, "eager", 47809.0, 0.98),
        _bench(34, "a", 40950.0),
        _bench(34, "eager", 47932.0, 0.99),
        _bench(34, "eager", 47870.0, 0.99),
    ]
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=runs)
    assert "alone on the GPU (run 34, steady half) 47870 tokens/s (median of 3 benches), GPU busy 99%" in line
    # Benches outside the GPU-host runs (a CPU price run) have no run number: `run ?`.
    (line,) = verdicts.lines(_verdicts(rs), bench_runs=[_bench(None, "eager", 5.0), _bench(None, "a", 4.0)])
    assert (
        "alone on the GPU (run ?, steady half) 5 tokens/s" in line and "0.80x eager (alone on the GPU, run ?)" in line
    )


def test_a_run_with_paired_and_unpaired_benches_says_which_ratio_is_which():
    # The lock cell and the no-cudagraphs lock in a price run's rounds, eager benched on its own.
    from dataclasses import replace

    runs = [replace(_bench(36, "global-lock+x", tok), round=r, run="t0") for r, tok in enumerate((40.0, 50.0, 44.0))]
    runs += [
        replace(_bench(36, "no-cudagraphs+global-lock", tok), round=r, run="t0")
        for r, tok in enumerate((40.0, 40.0, 40.0))
    ]
    runs.append(_bench(36, "eager", 22.0))
    (line,) = verdicts.lines(_verdicts(_launch_bound_cells()), bench_runs=runs)
    assert line.endswith(
        "run 36: 44 tokens/s (median of 3 benches), 2.00x eager, 1.10x `no-cudagraphs+global-lock` (3 paired rounds)."
    )
