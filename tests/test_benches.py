"""harness.analysis.bench_records and .benches: `dflash bench` records, from a run's log to REPORT.md's table."""

from __future__ import annotations

import json

import pytest

from harness.analysis import bench_records, benches
from harness.cli import main


def _line(tok: float, steady_busy: float | None = None) -> str:
    d = {
        "event": "bench",
        "preset": "gpu-launch-bound",
        "steps": 60,
        "tokens_per_s": 600.0,
        "tokens_per_s_steady": tok,
        "busy": {"prefetch": 0.0, "target": 0.99, "drafter": 0.44},
        "gpu_busy": 0.009,
        "torch": "2.11.0+cu130",
    }
    if steady_busy is not None:
        d["gpu_busy_steady"] = steady_busy
    return json.dumps(d)


LOG = "\n".join(
    [
        "== 2026-11-30T19:48:00Z budget 580 phases ...",
        "== phase bench:launch-bound:global-lock:default at 9s",
        "bench launch-bound global-lock rc=0 76s",
        _line(33127.85, 0.106),
        "== phase bench:launch-bound:single-thread-autograd:default at 141s",
        "samples loaded: 2032",
        _line(30318.81, 0.094),
        "== phase bench:launch-bound::none at 200s",
        _line(25000.0),
        "== phase bench:gpu-bound:cstash-tls-init at 260s",  # died: a record without figures
        "bench gpu-bound cstash-tls-init rc=1 40s",
        # run 26's tail: h200_run.sh prints the stderr's last lines, the traceback's header cut off
        "    out = step_fn(*inputs.as_args())",
        '  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", line 989, in compile_wrapper',
        "    raise RuntimeError(",
        "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function. "
        "This is not supported at the moment.",
        "== phase bench:gpu-bound::default at 280s",  # past h200_run.sh's limit
        "bench gpu-bound  rc=124 200s",
        "round 1: fault points idle: 6971.5 tokens/s",
        "== phase campaign:gpu-bound:* at 300s",
        '{"event": "bench", "stray": true}',  # not under a bench phase
    ]
)


def test_a_runs_log_gives_one_record_per_bench_phase_with_the_run_number():
    found = bench_records.parse_log(LOG, 11)
    assert [(d["phase"], d["call"], d.get("exit_code")) for d in found] == [
        ("bench:launch-bound:global-lock:default", 11, None),
        ("bench:launch-bound:single-thread-autograd:default", 11, None),
        ("bench:launch-bound::none", 11, None),
        ("bench:gpu-bound:cstash-tls-init", 11, 1),
        ("bench:gpu-bound::default", 11, 124),
    ]
    died, slow = found[3:]
    assert died["signature"].startswith("fx-trace-of-dynamo-fn (RuntimeError in ? at torch._dynamo.eval_frame")
    assert slow["signature"] == "timed out (exit 124)"


def test_a_bench_that_died_is_listed_under_the_table_and_one_that_timed_out_is_not_a_failure(tmp_path):
    path = tmp_path / "benches.jsonl"
    bench_records.add(_write(tmp_path, LOG), 11, path)
    loaded = bench_records.load([path])
    assert [(b.strategy, b.failed, b.timed_out) for b in loaded if b.exit_code] == [
        ("cstash-tls-init", True, False),
        ("no-cudagraphs", False, True),
    ]
    text = benches.body(loaded, ["benches.jsonl"])
    assert not any(line.startswith("| 11 | gpu-bound") for line in text.splitlines())  # no figures
    assert "- run 11, gpu-bound, 1 GPU(s), `cstash-tls-init`: exit 1, family F2: `fx-trace-of-dynamo-fn " in text
    assert "- run 11, gpu-bound, 1 GPU(s), `no-cudagraphs`: timed out (exit 124)" in text


@pytest.mark.parametrize(
    "phase, expected",
    [
        ("bench:launch-bound:global-lock:default", ("launch-bound", "no-cudagraphs+global-lock")),
        ("bench:launch-bound::default", ("launch-bound", "no-cudagraphs")),
        ("bench:gpu-bound::none", ("gpu-bound", "eager")),
        ("bench:tiny-cpu:global-lock:none", ("tiny-cpu", "eager+global-lock")),  # harness price: the lock's own cost
        ("bench:gpu-bound:cstash-tls-init", ("gpu-bound", "cstash-tls-init")),  # h200_run.sh's reduce-overhead
        ("bench:gpu-bound:", ("gpu-bound", "raw")),
        ("bench:launch-bound:global-lock:default:4", ("launch-bound", "no-cudagraphs+global-lock")),
        # run 21: --set fixes= takes commas; the cell is named with +
        (
            "bench:launch-bound:global-lock,cstash-tls-init,stash-incref",
            ("launch-bound", "global-lock+cstash-tls-init+stash-incref"),
        ),
    ],
)
def test_phases_name_strategies_as_the_campaign_cells_do(phase, expected):
    assert bench_records.strategy_of(phase) == expected


def test_the_table_prices_each_bench_within_its_run(tmp_path):
    path = tmp_path / "benches.jsonl"
    assert bench_records.add(_write(tmp_path, LOG), 11, path) == 5
    other = LOG.replace("33127.85", "40000.0")
    assert bench_records.add(_write(tmp_path, other, "b.txt"), 9, path) == 5
    text = benches.body(bench_records.load([path]), ["benches.jsonl"])
    rows = {
        tuple(line.split("|")[i].strip() for i in (1, 2, 4)): line
        for line in text.splitlines()
        if line.startswith("| 9 ") or line.startswith("| 11 ")
    }
    assert all(line.split("|")[3].strip() == "1" for line in rows.values())  # no device plan: 1 GPU
    sta11 = rows[("11", "launch-bound", "no-cudagraphs+single-thread-autograd")]
    assert "| 30319 | 0.92x | 1.21x | 0.9% | 9.4% | 0.44 / 0.99 |" in sta11
    # Run 9's lock ran 40,000: its single-thread-autograd is priced against that, not run 11's.
    assert "| 0.76x |" in rows[("9", "launch-bound", "no-cudagraphs+single-thread-autograd")]
    assert "| 25000 | 0.75x | 1.00x |" in rows[("11", "launch-bound", "eager")]


def test_adding_a_run_twice_adds_nothing_and_bad_input_writes_nothing(tmp_path, capsys):
    path = tmp_path / "benches.jsonl"
    log = _write(tmp_path, LOG)
    assert main(["benches", str(log), "11", "--into", str(path)]) == 0
    before = path.read_bytes()
    assert main(["benches", str(log), "11", "--into", str(path)]) == 0
    assert path.read_bytes() == before
    capsys.readouterr()
    path.write_text('{"event": "bench"}\n')  # no phase: not this table's file
    assert main(["benches", str(log), "12", "--into", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and path.read_text() == '{"event": "bench"}\n'
    assert main(["benches", str(tmp_path / "missing.txt"), "12", "--into", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()


def _write(tmp_path, text, name="log.txt"):
    p = tmp_path / name
    p.write_text(text + "\n")
    return p


@pytest.mark.parametrize("phase", ["bench:gpu-bound::none:four", "bench:gpu-bound::none:4:x", "bench::raw", "bench:x"])
def test_a_malformed_bench_phase_is_bad_input(phase):
    with pytest.raises(bench_records.BenchError, match="not a bench phase"):
        bench_records.strategy_of(phase)


def test_a_bench_counts_the_gpus_of_its_device_plan_and_is_priced_among_benches_on_as_many(tmp_path):
    one = {"target": ["cuda:0", "cuda:0"], "drafter": ["cuda:0"] * 3}
    four = {"target": ["cuda:0"] * 5, "drafter": ["cuda:1", "cuda:2", "cuda:3"]}
    cpu = {"target": ["cpu"], "drafter": ["cpu", "cpu"]}
    # No plan (the first H200 runs' records): one GPU; a plan on the CPU: none (`harness price` there).
    assert [bench_records.plan_gpus(p) for p in (one, four, None, cpu)] == [1, 4, 1, 0]

    def rec(phase, tok, plan):
        return {"phase": phase, "call": 20, **json.loads(_line(tok)), "device_plan": plan}

    path = tmp_path / "benches.jsonl"
    path.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                rec("bench:launch-bound:global-lock:default", 40000.0, one),
                rec("bench:launch-bound::none", 30000.0, one),
                rec("bench:launch-bound::none:4", 60000.0, four),
                rec("bench:launch-bound:global-lock:default:4", 90000.0, four),
            ]
        )
    )
    loaded = bench_records.load([path])
    assert [b.gpus for b in loaded] == [1, 1, 4, 4]
    rows = [line for line in benches.body(loaded, []).splitlines() if line.startswith("| 20 ")]
    # The 4-GPU lock is priced against the 4-GPU eager (1.50x), the 1-GPU one against its own (1.33x).
    assert any("| 4 | no-cudagraphs+global-lock | 60 | 90000 | 1.00x | 1.50x |" in r for r in rows)
    assert any("| 1 | no-cudagraphs+global-lock | 60 | 40000 | 1.00x | 1.33x |" in r for r in rows)

    # A verdict is priced by the benches on as many GPUs as its matrix's trials took.
    from harness.analysis.report import benches_for

    assert [b.gpus for b in benches_for("gpu-topology-4", loaded)] == [4, 4]
    assert [b.gpus for b in benches_for("gpu-campaign", loaded)] == [1, 1]
    assert [b.gpus for b in benches_for("a-spec-file-matrix", loaded)] == [1, 1]


def test_a_preset_benched_in_several_runs_gets_a_plot_with_its_died_benches(tmp_path):
    path = tmp_path / "benches.jsonl"
    bench_records.add(_write(tmp_path, LOG), 11, path)
    loaded = bench_records.load([path])
    plots = tmp_path / "plots"
    # One run per preset: the table says it all, no plot.
    assert benches.plot_paths(loaded, plots) == [] and benches.write_plots(loaded, plots) == []
    bench_records.add(_write(tmp_path, LOG.replace("33127.85", "40000.0"), "b.txt"), 12, path)
    loaded = bench_records.load([path])
    want = [plots / "benches-gpu-bound-1gpu.png", plots / "benches-launch-bound-1gpu.png"]
    assert benches.plot_paths(loaded, plots) == want
    assert benches.write_plots(loaded, plots) == want
    first = [p.read_bytes() for p in want]
    assert all(b.startswith(b"\x89PNG") for b in first)
    benches.write_plots(loaded, plots)
    assert [p.read_bytes() for p in want] == first  # no timestamps: same input, same bytes
    text = benches.body(loaded, ["benches.jsonl"], ["plots/benches-launch-bound-1gpu.png"])
    assert text.rstrip().endswith("![benches-launch-bound-1gpu](plots/benches-launch-bound-1gpu.png)")


def test_price_records_are_stamped_with_the_run_number_once(tmp_path):
    records = tmp_path / "price.jsonl"
    records.write_text(
        "".join(
            json.dumps(
                {
                    "phase": "bench:launch-bound:global-lock:default",
                    "call": None,
                    "round": r,
                    "tokens_per_s_steady": 100.0 + r,
                }
            )
            + "\n"
            for r in range(2)
        )
    )
    into = tmp_path / "benches.jsonl"
    assert bench_records.add_records(records, 33, into) == 2
    assert bench_records.add_records(records, 33, into) == 0  # unpacked twice: nothing new
    assert [(b.host_run, b.strategy, b.tokens_steady) for b in bench_records.load([into])] == [
        (33, "no-cudagraphs+global-lock", 100.0),
        (33, "no-cudagraphs+global-lock", 101.0),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    with pytest.raises(bench_records.BenchError, match="not a bench record"):
        bench_records.add_records(bad, 33, into)


def test_a_price_run_resumed_in_the_next_host_run_is_one_table_and_its_copy_adds_only_new_benches(tmp_path):
    # Host run 54 benched round 0 and stopped at --max-time; run 55 resumed it (`harness price
    # --resume` on a copy of 54's price.jsonl), so 55's price.jsonl holds 54's benches too.
    def rec(r, c, t):
        return {"phase": f"bench:default:{c}", "call": None, "run": "p1", "round": r, "tokens_per_s_steady": t}

    first = [rec(0, "global-lock", 100.0), rec(0, "phase-lock", 120.0)]
    second = [*first, rec(1, "phase-lock", 110.0), rec(1, "global-lock", 100.0)]
    into = tmp_path / "benches.jsonl"
    assert bench_records.add_records(first, 54, into) == 2
    assert bench_records.add_records(second, 55, into) == 2
    loaded = bench_records.load([into])
    assert [(b.host_run, b.round) for b in loaded] == [(54, 0), (54, 0), (55, 1), (55, 1)]
    (pr,) = benches.price_groups(loaded)
    assert pr.name == "runs 54+55" and pr.order == ["global-lock", "phase-lock"]
    assert "Priced in rounds (`harness price`), runs 54+55, default, 1 GPU(s): 2 round(s)" in benches.body(
        loaded, ["b"]
    )


TWO_ROUNDS = [
    (0, "global-lock:default", 100.0),
    (0, "cudagraph-lock", 110.0),
    (1, "cudagraph-lock", 90.0),
    (1, "global-lock:default", 80.0),
]
"""A price run's first two rounds, (round, configuration, tokens/s): harness price's order A B, B A."""


def test_a_priced_run_gets_its_paired_prices_under_the_table(tmp_path):
    # harness price's run order A B, B A, A B: the base is what round 0 benched first.
    path = tmp_path / "benches.jsonl"
    order = [*TWO_ROUNDS, (2, "global-lock:default", 120.0), (2, "cudagraph-lock", 126.0)]
    path.write_text(
        "".join(
            json.dumps({"phase": f"bench:launch-bound:{c}", "call": 34, "round": r, "tokens_per_s_steady": t}) + "\n"
            for r, c, t in order
        )
    )
    text = benches.body(bench_records.load([path]), ["b"])
    assert "Priced in rounds (`harness price`), run 34, launch-bound, 1 GPU(s): 3 round(s)" in text
    assert "over `no-cudagraphs+global-lock`'s" in text
    assert "| `cudagraph-lock` | 3/3 | 110 | 90-126 | 1.10x | 1.05x-1.12x | 75% |" in text
    # Benches of the other runs (no rounds) get no such block.
    assert "Priced in rounds" not in benches.body(bench_records.load([path])[:0], ["b"])


def test_two_price_runs_in_one_file_pair_their_rounds_apart(tmp_path):
    path = tmp_path / "benches.jsonl"
    rows = [("r1", 0, "", 100.0), ("r1", 0, "global-lock", 50.0), ("r2", 0, "", 100.0), ("r2", 0, "global-lock", 90.0)]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "phase": f"bench:cpu-compile:{c}:default",
                    "call": None,
                    "run": run,
                    "round": r,
                    "tokens_per_s_steady": t,
                }
            )
            + "\n"
            for run, r, c, t in rows
        )
    )
    text = benches.body(bench_records.load([path]), ["b"])
    assert "run ? (price run of r1), cpu-compile" in text and "run ? (price run of r2), cpu-compile" in text
    assert "| 0.50x | 0.50x-0.50x |" in text and "| 0.90x | 0.90x-0.90x |" in text


def test_price_runs_are_tables_not_plot_bars(tmp_path):
    path = tmp_path / "benches.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"phase": "bench:launch-bound::none", "call": c, "run": "r", "round": 0, "tokens_per_s_steady": 1.0}
            )
            + "\n"
            for c in (40, 41)
        )
    )
    assert benches.plot_paths(bench_records.load([path]), tmp_path) == []


def test_a_price_run_of_two_rounds_or_more_gets_its_own_plot_linked_under_its_table(tmp_path):
    path = tmp_path / "benches.jsonl"
    order = TWO_ROUNDS
    lines = [
        {
            "phase": f"bench:launch-bound:{c}",
            "call": 35,
            "run": "2026-12-01T13:09:56+00:00",
            "round": r,
            "tokens_per_s_steady": t,
        }
        for r, c, t in order
    ]
    # Run 35 ran a second price run (another --set): its own plot. Run 36's one round and run
    # 37's one configuration have nothing to compare per round: no plot.
    lines += [dict(x, run="2026-12-01T13:20:00+00:00", sets=["pipeline.num_drafter_threads=4"]) for x in lines]
    lines += [{"phase": "bench:launch-bound::none", "call": 36, "round": 0, "tokens_per_s_steady": 1.0}]
    lines += [{"phase": "bench:launch-bound::none", "call": 37, "round": r, "tokens_per_s_steady": 1.0} for r in (0, 1)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    loaded = bench_records.load([path])
    plots = benches.price_plots(loaded, tmp_path / "elsewhere")
    want = [
        tmp_path / "plots" / "price-launch-bound-1gpu-35-20261201130956.png",  # beside the bench file
        tmp_path / "plots" / "price-launch-bound-1gpu-35-20261201132000.png",
    ]
    assert sorted(plots.values()) == want
    assert benches.write_price_plots(loaded, tmp_path / "elsewhere") == want
    first = [p.read_bytes() for p in want]
    assert all(b.startswith(b"\x89PNG") for b in first) and first[0] != first[1]
    benches.write_price_plots(loaded, tmp_path / "elsewhere")
    assert [p.read_bytes() for p in want] == first  # no timestamps: same input, same bytes
    text = benches.body(loaded, ["b"], [], {k: f"plots/{p.name}" for k, p in plots.items()})
    for p in want:  # each run's plot under its own table
        link = text.index(f"![{p.stem}](plots/{p.name})")
        assert text.rindex("| `cudagraph-lock` | 2/2 |", 0, link) > text.rfind("![", 0, link)
    assert "run 36" in text and "run 37" in text and text.count("![price-") == 2
