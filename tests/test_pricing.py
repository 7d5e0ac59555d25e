"""`python -m harness price`: interleaved benches alone on the machine, priced by paired ratios."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.analysis import bench_records, benches, prices
from harness.bench import pricing
from harness.bench.pricing import Config, PriceError
from harness.commands import price

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _price_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m harness price ARGS` in a fresh process, from the checkout."""
    cmd = [sys.executable, "-m", "harness", "price", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def _plan(configs=(":none", "global-lock:none", "global-lock:default"), rounds=3, **kw):
    return pricing.make_plan("tiny-cpu", list(configs), rounds=rounds, steps=5, **kw)


def test_rounds_alternate_the_order_so_a_drift_weighs_on_every_configuration_alike():
    plan = _plan(rounds=3)
    names = [(r, c.strategy(plan.workload)) for r, c in plan.order()]
    a, b, c = "eager", "eager+global-lock", "no-cudagraphs+global-lock"
    assert names == [(0, a), (0, b), (0, c), (1, c), (1, b), (1, a), (2, a), (2, b), (2, c)]


def test_gpu_presets_record_the_campaigns_workload_names():
    plan = pricing.make_plan(
        "gpu-launch-bound", ["global-lock,stash-incref:default", "global-lock"], rounds=1, steps=5, cuda_count=1
    )
    assert plan.workload == "launch-bound"
    assert plan.configs[0].phase(plan.workload) == "bench:launch-bound:global-lock,stash-incref:default"
    assert bench_records.strategy_of(plan.configs[0].phase(plan.workload)) == (
        "launch-bound",
        "no-cudagraphs+global-lock+stash-incref",
    )
    # Without a mode, the preset's own (reduce-overhead, what REPORT recommends there), named as
    # the campaign names it.
    assert plan.configs[1] == Config(fixes="global-lock", mode="reduce-overhead")
    assert plan.configs[1].strategy(plan.workload) == "global-lock"


@pytest.mark.parametrize(
    "preset, configs, rounds, message",
    [
        ("nope", [":none"], 1, "unknown preset 'nope'"),
        ("tiny-cpu", ["global-lock,bogus"], 1, "unknown fix 'bogus'"),
        ("tiny-cpu", [":bogus"], 1, "compile.mode must be one of"),
        ("tiny-cpu", [":none", ":none"], 1, "named twice"),
        ("tiny-cpu", [":none"], 0, "--rounds and --steps must be >= 1"),
        ("tiny-cpu", [], 1, "at least one configuration"),
    ],
)
def test_bad_input_is_one_error_before_any_bench(preset, configs, rounds, message):
    with pytest.raises(PriceError, match=message):
        pricing.make_plan(preset, configs, rounds=rounds, steps=5)


def test_a_gpu_run_prices_each_configuration_with_its_gpu_busy_fraction_and_a_cpu_run_without():
    runs = [
        prices.Run(strategy="A", round=0, tokens=100.0, gpu_busy=0.98),
        prices.Run(strategy="A", round=1, tokens=110.0, gpu_busy=0.99),
        prices.Run(strategy="B", round=0, tokens=90.0, gpu_busy=0.5),
        prices.Run(strategy="B", round=1, tokens=None, died="segv"),
    ]
    text = "\n".join(prices.rows(prices.price_runs(runs, ["A", "B"])))
    assert "| coverage | GPU busy |" in text
    assert "| `A` | 2/2 | 105 | 100-110 | 1.00x (base) | - | - | 98% |" in text  # median of .98, .99
    assert "| `B` | 1/2 | 90 | 90-90 | 0.90x | 0.90x-0.90x | 0% | 50% |" in text  # the died bench has no figure
    cpu = [prices.Run(strategy=x.strategy, round=x.round, tokens=x.tokens, died=x.died) for x in runs]
    assert "GPU busy" not in "\n".join(prices.rows(prices.price_runs(cpu, ["A", "B"])))


def test_a_device_plan_this_machine_cannot_run_is_refused_before_any_bench():
    # A GPU preset, or --topology, on a machine without CUDA died in every bench, each recorded.
    with pytest.raises(PriceError, match="'cuda:0' requested but CUDA is not available"):
        pricing.make_plan("gpu-launch-bound", [":none"], rounds=1, steps=5, cuda_count=0)
    with pytest.raises(PriceError, match="CUDA is not available"):
        pricing.make_plan("tiny-cpu", [":none"], rounds=1, steps=5, topology=4, cuda_count=0)
    assert pricing.make_plan("tiny-cpu", [":none"], rounds=1, steps=5, topology=4, cuda_count=1).rounds == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_the_cli_refuses_a_topology_without_cuda_in_one_line_and_writes_nothing(tmp_path):
    into = tmp_path / "b.jsonl"
    p = _price_cli("--topology", "4", "--into", str(into), ":none")
    assert p.returncode == 2 and not into.exists() and p.stdout == ""
    assert p.stderr.strip().splitlines() == ["error: device 'cuda:0' requested but CUDA is not available"]


def _fake(figures):
    """A bench function that returns figures[(round-independent call index)] in run order."""
    calls = iter(figures)

    def bench(plan, config, limit_s=None, dump_dir=None):
        tok = next(calls)
        if tok is None:
            return {"event": "bench", "exit_code": 1, "signature": "fx-trace-of-dynamo-fn (RuntimeError ...)"}
        return {"event": "bench", "tokens_per_s_steady": tok, "steps": plan.steps}

    return bench


def test_a_price_is_the_median_of_per_round_ratios_with_its_interval():
    # H200 run 30's shape: the same base benched 35,841 and 30,406 (a drift), the other one beside it.
    plan = _plan(configs=("global-lock:none", ":none"), rounds=3)
    # run order: r0 A B, r1 B A, r2 A B
    records = pricing.run(plan, bench=_fake([100.0, 110.0, 88.0, 80.0, 120.0, 126.0]), log=lambda s: None)
    assert [d["round"] for d in records] == [0, 0, 1, 1, 2, 2]
    base, other = pricing.prices(plan, records)
    assert base.ratio is None and base.tokens == [100.0, 80.0, 120.0]
    assert other.ratio.median == pytest.approx(1.10) and other.ratio.coverage == 0.75
    assert (other.ratio.low, other.ratio.high) == (pytest.approx(1.05), pytest.approx(1.10))
    text = pricing.table(plan, [base, other], target=1.2)
    assert "| `eager` | 3/3 | 110 | 88-126 | 1.10x | 1.05x-1.10x | 75% |" in text
    assert "- `eager` against 1.2x `eager+global-lock`: misses (interval 1.05x-1.10x (75%))" in text


def test_a_bench_that_dies_is_listed_and_drops_out_of_its_rounds_ratio():
    plan = _plan(configs=("global-lock:none", ":none"), rounds=2)
    records = pricing.run(plan, bench=_fake([100.0, None, 130.0, 100.0]), log=lambda s: None)
    _, other = pricing.prices(plan, records)
    assert other.died == ["round 0: fx-trace-of-dynamo-fn (RuntimeError ...)"]
    assert other.tokens == [130.0] and other.ratio.median == pytest.approx(1.3) and other.ratio.coverage == 0.0
    assert "| `eager` | 1/2 |" in pricing.table(plan, pricing.prices(plan, records))


def test_a_bench_past_the_limit_is_counted_and_said_timed_out_not_died():
    # H200 run 58's shape: the first, cold bench of the CUDA-graph set was still autotuning at 150 s.
    plan = _plan(configs=("global-lock:none", ":none"), rounds=2)
    figures = iter([None, 100.0, 130.0, 120.0])

    def bench(plan, config, limit_s=None, dump_dir=None):
        tok = next(figures)
        if tok is None:
            return {"event": "bench", "exit_code": pricing.TIMEOUT_RC, "signature": "timed out (exit 124)"}
        return {"event": "bench", "tokens_per_s_steady": tok, "steps": plan.steps}

    records = pricing.run(plan, bench=bench, log=lambda s: None)
    base, _ = pricing.prices(plan, records)
    assert base.died == [] and base.timed_out == ["round 0"] and base.tokens == [120.0]
    text = pricing.table(plan, [base, _])
    assert "| `eager+global-lock` | 1/2 |" in text and "died alone" not in text
    assert "- `eager+global-lock` timed out: round 0 (still running at the bench limit" in text
    # The bench file's reading of the same records says the same.
    rows = prices.rows(
        prices.price_runs(
            [
                prices.Run(strategy="a", round=0, tokens=None, timed_out=True),
                prices.Run(strategy="a", round=1, tokens=9.0),
            ],
            ["a"],
        )
    )
    assert "| `a` | 1/2 |" in "\n".join(rows) and any("timed out: round 0" in line for line in rows)


def test_three_configurations_are_also_priced_each_over_each_other_by_round():
    # H200 run 35's figures (2026-12-01): the base column shows B 0.95x A and C 0.84x A;
    # B over C, 1.13x in every round, shows only in the grid. A died bench weakens its pairs.
    runs = [
        prices.Run(strategy=s, round=r, tokens=t)
        for r, row in enumerate([(39890.0, 45116.0, 39781.0), (49826.0, 43156.0, 38150.0), (40818.0, 38953.0, 34324.0)])
        for s, t in zip("ABC", row)
    ]
    text = "\n".join(prices.rows(prices.price_runs(runs, ["A", "B", "C"])))
    assert "(row over column, per round: the median and its interval, coverage 75%)" in text
    assert "| B `B` | 0.95x (0.87-1.13) | - | 1.13x (1.13-1.13) |" in text
    assert "| A `A` | - | 1.05x (0.88-1.15) | 1.19x (1.00-1.31) |" in text
    died = [x for x in runs if not (x.strategy == "C" and x.round == 1)]
    grid = "\n".join(prices.rows(prices.price_runs(died, ["A", "B", "C"])))
    # C's pairs have 2 rounds now (50%, the header's), A's and B's 3: theirs is said.
    assert (
        "its interval, coverage 50%)" in grid and "| B `B` | 0.95x (0.87-1.13, 75%) | - | 1.13x (1.13-1.13) |" in grid
    )
    # Two configurations that never ran in one round: said, not shown as the diagonal's "-".
    apart = [*runs[:3], prices.Run(strategy="D", round=9, tokens=1.0)]
    assert "| D `D` | no shared round | no shared round | no shared round | - |" in "\n".join(
        prices.rows(prices.price_runs(apart, ["A", "B", "C", "D"]))
    )
    # Two configurations: the base column says it all.
    assert "Every configuration" not in "\n".join(prices.rows(prices.price_runs(runs[:2], ["A", "B"])))


@pytest.mark.parametrize("low, high, word", [(1.21, 1.4, "meets"), (1.0, 1.19, "misses"), (1.1, 1.3, "undecided")])
def test_the_target_is_met_only_when_the_whole_interval_clears_it(low, high, word):
    from harness.stats import MedianInterval

    assert prices.verdict(MedianInterval(median=(low + high) / 2, low=low, high=high, coverage=0.9), 1.2).startswith(
        word
    )


def test_records_append_to_a_bench_file_that_report_reads(tmp_path):
    plan = _plan(configs=(":none", "global-lock:none"), rounds=1, host_run=33)
    into = tmp_path / "benches.jsonl"
    into.write_text(json.dumps({"phase": "bench:launch-bound::none", "call": 30, "tokens_per_s_steady": 1.0}) + "\n")
    pricing.save(pricing.run(plan, bench=_fake([10.0, 12.0]), log=lambda s: None), into)
    loaded = bench_records.load([into])
    assert [(b.host_run, b.strategy, b.tokens_steady) for b in loaded] == [
        (30, "eager", 1.0),
        (33, "eager", 10.0),
        (33, "eager+global-lock", 12.0),
    ]
    bad = tmp_path / "other.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(PriceError, match="not a bench record"):
        pricing.save([], bad)
    assert bad.read_text() == "not json\n"


def test_the_cli_benches_for_real_and_refuses_a_foreign_file_before_running(tmp_path):
    """Two eager configurations of tiny-cpu, one round each (about 10 s of CPU each)."""
    bad = tmp_path / "notes.jsonl"
    bad.write_text("hello\n")
    cmd = ["--steps", "6", "--rounds", "1"]
    refused = _price_cli(*cmd, ":none", "--into", str(bad))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "not a bench record" in refused.stderr
    into = tmp_path / "benches.jsonl"
    done = _price_cli(*cmd, ":none", "global-lock:none", "--into", str(into), "--run", "5", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| `eager+global-lock` | 1/1 |" in done.stdout
    loaded = bench_records.load([into])
    assert [(b.host_run, b.strategy) for b in loaded] == [(5, "eager"), (5, "eager+global-lock")]
    assert all(b.tokens_steady and b.tokens_steady > 0 and b.torch for b in loaded)
    assert all(b.sets == () for b in loaded)


def test_the_run_number_option_keeps_call_as_an_alias():
    from harness.cli import build_parser

    parser = build_parser()
    for option in ("--run", "--call"):
        assert parser.parse_args(["price", ":none", option, "7"]).host_run == 7


def test_a_runs_overrides_are_recorded_and_named_in_the_report(tmp_path):
    plan = _plan(configs=(":none", "global-lock:none"), rounds=1, sets=["pipeline.num_drafter_threads=3"])
    into = tmp_path / "benches.jsonl"
    pricing.save(pricing.run(plan, bench=_fake([10.0, 9.0]), log=lambda s: None), into)
    loaded = bench_records.load([into])
    assert {b.sets for b in loaded} == {("pipeline.num_drafter_threads=3",)}
    # The fake benches carry no device plan: read as one GPU, as the first H200 runs' records.
    assert "1 GPU(s), `--set pipeline.num_drafter_threads=3`: 1 round(s)" in benches.body(loaded, ["b"])


def test_a_stopped_run_keeps_and_prices_the_benches_it_finished(tmp_path, capsys, monkeypatch):
    # A run's time limit sends SIGTERM mid-round (harness.cli turns it into KeyboardInterrupt).
    figures = iter([100.0, 110.0, 120.0])

    def bench(plan, config, limit_s=None, dump_dir=None):
        tok = next(figures, None)
        if tok is None:
            raise KeyboardInterrupt
        return {"event": "bench", "tokens_per_s_steady": tok}

    monkeypatch.setattr(pricing, "bench_once", bench)
    into = tmp_path / "b.jsonl"
    opts = __import__("argparse").Namespace(
        preset="tiny-cpu",
        configs=[":none", "global-lock:none"],
        rounds=2,
        steps=5,
        sets=[],
        timeout_s=60.0,
        host_run=4,
        into=into,
        target=None,
        topology=None,
        max_time_s=None,
        resume=False,
        dumps=None,
    )
    with pytest.raises(KeyboardInterrupt):
        price.run(opts)
    assert [(b.strategy, b.tokens_steady) for b in bench_records.load([into])] == [
        ("eager", 100.0),
        ("eager+global-lock", 110.0),
        ("eager+global-lock", 120.0),
    ]
    assert "| `eager+global-lock` | 2/2 | 115 | 110-120 | 1.10x | 1.10x-1.10x | 0% |" in capsys.readouterr().out


def test_a_topology_prices_the_seed_device_plan_and_a_bad_one_is_refused():
    plan = pricing.make_plan(
        "gpu-launch-bound", ["global-lock"], rounds=1, steps=5, topology=4, sets=["train.steps=7"], cuda_count=1
    )
    assert plan.sets == [
        "pipeline.num_target_threads=5",
        "pipeline.num_drafter_threads=3",
        "devices.target_devices=cuda:0",
        "devices.drafter_devices=cuda:1,cuda:2,cuda:3",
        "devices.remap=true",
        "train.steps=7",
    ]
    assert (
        pricing.make_plan("gpu-launch-bound", ["global-lock"], rounds=1, steps=5, topology=2, cuda_count=1).sets[0]
        == "pipeline.num_target_threads=2"
    )
    with pytest.raises(PriceError, match="needs >= 2 GPUs"):
        pricing.make_plan("gpu-launch-bound", ["global-lock"], rounds=1, steps=5, topology=1)


def test_recommended_is_a_configuration_a_bench_resolves_and_its_extra_names_are_checked():
    # `dflash bench` resolves `recommended` on the machine that runs it (harness.runtime.fixes.recommended_sets.resolve_names).
    plan = pricing.make_plan("tiny-cpu", ["recommended", "recommended,global-lock:default", ":none"], rounds=1, steps=5)
    assert [c.fixes for c in plan.configs][:2] == ["recommended", "recommended,global-lock"]
    with pytest.raises(pricing.PriceError, match="unknown fix 'bogus'"):
        pricing.make_plan("tiny-cpu", ["recommended,bogus"], rounds=1, steps=5)


def test_a_configuration_may_name_its_drafter_thread_count_and_is_priced_as_its_own_strategy():
    c = pricing.parse_config(":none@1", "default")
    assert (c.fixes, c.mode, c.drafters) == ("", "none", 1)
    assert c.sets() == ["pipeline.num_drafter_threads=1"]
    assert c.phase("default") == "bench:default::none@1"
    assert c.strategy("default") == "eager@1"
    assert pricing.parse_config("global-lock", "default").strategy("default") == "no-cudagraphs+global-lock"
    with pytest.raises(pricing.PriceError, match="drafter threads after @"):
        pricing.parse_config(":none@0", "default")
    plan = pricing.make_plan("tiny-cpu", [":none@1", ":none@2"], rounds=1, steps=2)
    argvs = []
    pricing.run(
        plan,
        bench=lambda p, cfg, *_: argvs.append(cfg.sets()) or {"event": "bench", "tokens_per_s_steady": 1.0},
        log=lambda s: None,
    )
    assert argvs == [["pipeline.num_drafter_threads=1"], ["pipeline.num_drafter_threads=2"]]


def test_a_bench_past_its_timeout_is_dumped_before_the_kill_and_recorded_as_timed_out(tmp_path):
    # One second is less than torch's import: the bench is still starting when it is stopped.
    into = tmp_path / "b.jsonl"
    p = _price_cli("--rounds", "1", "--timeout-s", "1", "--into", str(into), ":none")
    assert p.returncode == 1, p.stderr[-2000:]
    (record,) = bench_records.read_records(into)
    assert record["exit_code"] == pricing.TIMEOUT_RC and record["signature"].startswith("timed out")
    dump = tmp_path / record["dump"]  # relative to the bench file's folder
    assert dump.parent.parent == tmp_path / "b-dumps" and dump.is_file() and "dump of pid" in dump.read_text()
    assert dump.read_text().startswith("torch ")  # `harness diagnose` judges it on the bench's torch
    assert f"python -m harness diagnose {dump}" in p.stderr


def test_max_time_starts_no_bench_that_would_not_fit_and_resume_runs_the_rest(tmp_path):
    now = [0.0]
    walls = {"eager": 40.0, "eager+global-lock": 50.0}

    def bench(plan, config, limit_s, dump_dir):
        wall = walls[config.strategy(plan.workload)]
        if plan.max_time_s is not None:  # the first run starts at 0
            assert limit_s == min(plan.timeout_s, plan.max_time_s - now[0])
        now[0] += wall
        return {"event": "bench", "tokens_per_s_steady": 100.0 + wall}

    logged = []
    # r0: eager 40, lock 50 (90 s); r1: lock would end at 140 > 120: not started.
    plan = _plan(configs=(":none", "global-lock:none"), rounds=2, max_time_s=120.0)
    first = pricing.run(plan, bench=bench, log=logged.append, clock=lambda: now[0])
    assert [(d["round"], d["wall_s"]) for d in first] == [(0, 40.0), (0, 50.0)]
    assert "stopped at --max-time with 2 bench(es) of 4 left" in logged[-1]
    again = _plan(configs=(":none", "global-lock:none"), rounds=2)
    held = pricing.resumed(again, first)
    assert again.run_id == plan.run_id
    done = pricing.run(again, bench=bench, log=lambda s: None, records=held, clock=lambda: now[0])
    assert [(d["round"], d["run"]) for d in done] == [(0, plan.run_id)] * 2 + [(1, plan.run_id)] * 2
    with pytest.raises(PriceError, match="priced something else: bench:tiny-cpu:global-lock:none"):
        pricing.resumed(_plan(configs=(":none",), rounds=2), first)


def test_a_bench_cut_by_max_time_is_not_a_failure(tmp_path):
    into = tmp_path / "b.jsonl"
    p = _price_cli("--rounds", "1", "--max-time", "1", "--into", str(into), ":none")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "cut by --max-time" in p.stderr and "with --resume runs them" in p.stderr
    assert not into.exists() or bench_records.read_records(into) == []
    refused = _price_cli("--resume", ":none")
    assert refused.returncode == 2 and refused.stderr == "error: --resume needs --into with the run to resume\n"
