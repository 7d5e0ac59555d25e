"""Claims about per-cell summaries and REPORT.md regeneration (from hand-made stores, no trials)."""

from __future__ import annotations

import pytest
from records import record

from harness.analysis import cell_plots, cell_tables, excerpts, report
from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR
from harness.analysis.summary import summarize
from harness.stores import discovery
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult


def _r(
    cell: str,
    i: int,
    outcome: Outcome,
    *,
    sig: str | None = None,
    tok: float | None = None,
    duration: float = 2.0,
    ttf: float | None = None,
    matrix: str = "m",
) -> TrialResult:
    return TrialResult(
        trial_id=f"{matrix}/{cell}/{i}",
        cell=cell,
        trial_index=i,
        outcome=outcome,
        signature=sig,
        signature_summary=f"summary of {sig}" if sig else None,
        tokens_per_s=tok,
        duration_s=duration,
        time_to_failure_s=ttf,
        started_at=f"2026-11-29T10:00:{i:02d}+00:00",
        torch_version="2.13.0",
        host="h",
    )


def _records() -> list[TrialResult]:
    rs = []
    rs += [_r("w:raw@p", i, Outcome.CRASH, sig="s1", ttf=1.0) for i in range(3)]
    rs += [_r("w:raw@p", 3, Outcome.ABORT, sig="s2", ttf=0.5)]
    rs += [_r("w:raw@p", i, Outcome.OK, tok=100.0) for i in range(4, 10)]
    rs += [_r("w:fix@p", i, Outcome.OK, tok=80.0 + i) for i in range(10)]
    rs += [
        _r("w:fix@p", 10, Outcome.TIMEOUT),
        _r("w:fix@p", 11, Outcome.HARNESS_ERROR),
        _r("w:fix@p", 12, Outcome.RESOURCE, sig="oom"),
    ]
    rs += [_r("w:lock@p", i, Outcome.OK, tok=40.0) for i in range(5)]
    return rs


def test_summary_counts_failures_wilson_and_rule_of_three():
    cells = {c.cell: c for c in summarize(_records())}
    raw, fix = cells["w:raw@p"], cells["w:fix@p"]
    assert (raw.k, raw.n) == (4, 10)
    assert raw.low == pytest.approx(0.1682, abs=1e-3) and raw.high == pytest.approx(0.6873, abs=1e-3)
    assert raw.signatures == [("summary of s1", 3), ("summary of s2", 1)]
    assert raw.rule_of_three is None
    # TIMEOUT, RESOURCE and HARNESS_ERROR are not trials: 0/10, bound 3/10.
    assert (fix.k, fix.n, fix.timeouts, fix.resources, fix.errors) == (0, 10, 1, 1, 1)
    assert fix.rule_of_three == pytest.approx(0.3)
    assert fix.outcomes == {"HARNESS_ERROR": 1, "OK": 10, "RESOURCE": 1, "TIMEOUT": 1}
    assert fix.signatures == []  # an out-of-memory is not a race signature


def test_tokens_ratio_is_against_the_fastest_clean_cell_of_the_workload():
    cells = {c.cell: c for c in summarize(_records())}
    # raw is faster (100) but failing; the fastest clean cell is fix (median 84.5).
    assert cells["w:fix@p"].tokens_ratio == pytest.approx(1.0)
    assert cells["w:lock@p"].tokens_ratio == pytest.approx(40.0 / 84.5)
    assert cells["w:raw@p"].tokens_ratio == pytest.approx(100.0 / 84.5)


def test_tokens_ratio_compares_only_cells_measured_on_the_same_host_and_day():
    import dataclasses

    # The lock cell ran on another day: it is its own day's best, not 0.47x the fix of this one.
    other_day = [
        dataclasses.replace(r, started_at="2026-11-30T10:00:00Z") if r.cell == "w:lock@p" else r for r in _records()
    ]
    cells = {c.cell: c for c in summarize(other_day)}
    assert cells["w:lock@p"].tokens_ratio == pytest.approx(1.0)
    assert cells["w:fix@p"].tokens_ratio == pytest.approx(1.0)
    assert cells["w:lock@p"].measured_on == ("h", "2026-11-30")


def test_time_to_first_failure_uses_time_to_failure_of_failing_runs():
    raw = {c.cell: c for c in summarize(_records())}["w:raw@p"]
    # p = 0.4 -> median 2 runs: one passing run (2 s) + mean time to failure (0.875 s).
    assert raw.ttff_s == pytest.approx(2.0 + 0.875)


def test_cells_are_ordered_raw_first_and_the_table_shows_k_over_n():
    cells = summarize(_records())
    assert [c.cell for c in cells] == ["w:raw@p", "w:fix@p", "w:lock@p"]
    table = cell_tables.text_table(cells, width=200)  # wide enough that no entry wraps
    assert "4/10" in table and "0/10 +1 timeout +1 oom +1 error" in table and "p<30.0%" in table
    assert "0/10 +1 timeout +1" in cell_tables.text_table(cells)  # at 120 columns the rest wraps


def test_a_cell_too_small_to_test_says_so_instead_of_a_bound_or_p():
    rs = [_r("w:raw@p", i, Outcome.CRASH, sig="s1", ttf=1.0) for i in range(3)]
    rs += [_r("w:few@p", i, Outcome.OK) for i in range(3)]  # 0/3 vs 3/3: best p 1/C(6,3) = 5%, not below
    rs += [_r("w:enough@p", i, Outcome.OK) for i in range(4)]  # 0/4 vs 3/3: 1/C(7,4) = 2.9%
    cells = {c.cell: c for c in summarize(rs)}
    few, enough = (cell_tables.cell_row(cells[n], n_raw=3) for n in ("w:few@p", "w:enough@p"))
    assert few[3] == "[0.0%, 56.1%] too few trials" and few[4] == "too few trials"
    assert enough[3].endswith(" p<75.0%") and enough[4] == f"{cells['w:enough@p'].fisher_p:.3g}"
    assert not cell_tables.can_reject(3, 3) and cell_tables.can_reject(4, 3) and cell_tables.can_reject(2, 20)
    assert "too few trials" in cell_tables.markdown_table(list(cells.values()))


def test_the_matrix_table_fits_120_columns_and_explains_its_terms():
    long = "w:global-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync+target-hook-taps@p"
    rs = _records() + [_r(long, i, Outcome.OK, tok=90.0) for i in range(2)]
    cells = summarize(rs)
    table = cell_tables.text_table(cells).splitlines()
    assert max(len(line) for line in table) <= 120
    assert "".join(line.split("  ")[0] for line in table[2:] if not line.startswith("w:raw")).count("cstash") == 1
    assert "top signature" not in table[0]  # listed in full under the table
    legend = "\n".join(cell_tables.text_legend(cells))
    for term in ("k/n:", "95% CI (Wilson):", "p<X:", "p vs raw:", "too few trials:", "TTFF:", "tok/s:", "vs best:"):
        assert term in legend
    assert max(len(line) for line in legend.splitlines()) <= 120


def test_a_gpu_matrix_gets_a_memory_column_from_reported_and_sampled_figures_a_cpu_one_none():
    import dataclasses

    assert "GPU GiB" not in cell_tables.text_table(summarize(_records()))
    assert "GPU GiB" not in cell_tables.markdown_table(summarize(_records()))
    rs = _records()
    rs[0] = dataclasses.replace(rs[0], final={"event": "failed", "gpu_mem_peak_gib": {"cuda:0": 20.0, "cuda:1": 3.0}})
    rs[1] = dataclasses.replace(rs[1], gpu_mem_gib=21.5)  # sampled above the other's report
    rs[10] = dataclasses.replace(rs[10], final={"gpu_mem_peak_gib": {"cuda:0": 9.0}}, gpu_mem_gib=8.0)
    cells = {c.cell: c for c in summarize(rs)}
    assert (cells["w:raw@p"].gpu_peak_gib, cells["w:fix@p"].gpu_peak_gib, cells["w:lock@p"].gpu_peak_gib) == (
        21.5,
        9.0,
        None,
    )
    table = cell_tables.markdown_table(summarize(rs)).splitlines()
    assert table[0].endswith("| vs best | GPU GiB |")
    assert table[2].endswith("| 21.5 |") and table[4].endswith("| - |")
    text = cell_tables.text_table(summarize(rs)).splitlines()
    rows = {line.split()[0]: line for line in text if line.startswith("w:")}  # first lines of wrapped rows
    assert text[0].endswith("vs best  GPU GiB") and rows["w:raw@p"].endswith("21.5") and rows["w:lock@p"].endswith("-")
    # A device that could not say (null) or a stray string is left out, not fatal to the report.
    rs[2] = dataclasses.replace(rs[2], final={"gpu_mem_peak_gib": {"cuda:0": None, "cuda:1": "n/a", "cuda:2": 30.0}})
    rs[3] = dataclasses.replace(rs[3], final={"gpu_mem_peak_gib": {"cuda:0": None}})
    assert {c.cell: c.gpu_peak_gib for c in summarize(rs)}["w:raw@p"] == 30.0
    assert rs[3].gpu_peak_gib is None


def test_replace_block_keeps_text_outside_the_markers_verbatim():
    text = "# Report\n\nhand-written intro\n\n<!-- harness:begin m -->\nold\n<!-- harness:end m -->\n\ntail |x|\n"
    out = report.replace_block(text, "m", "new table")
    assert (
        out
        == "# Report\n\nhand-written intro\n\n<!-- harness:begin m -->\nnew table\n<!-- harness:end m -->\n\ntail |x|\n"
    )
    added = report.replace_block(out, "other", "b")
    assert added.startswith(out) and added.endswith("<!-- harness:begin other -->\nb\n<!-- harness:end other -->\n")
    with pytest.raises(ValueError, match="unbalanced"):
        report.replace_block(text + "<!-- harness:begin m -->\n", "m", "x")


def _store(tmp_path, name: str, records) -> Store:
    store = Store(tmp_path / "results" / name)
    for r in records:
        store.append(r)
    return store


def test_rebuild_is_byte_identical_and_writes_plots(tmp_path):
    _store(tmp_path, "m", _records())
    _store(tmp_path, "other", [_r("x:raw@-", i, Outcome.OK, matrix="other") for i in range(3)])
    out = tmp_path / "REPORT.md"
    out.write_text("# Report\n\nKeep me.\n")
    stores = discovery.default_stores(tmp_path / "results")
    assert [s.name for s in stores] == ["m", "other"]
    assert report.rebuild(stores, out) == ["m", "other"]
    summary = tmp_path / "results" / "m" / report.SUMMARY_NAME
    first = summary.read_bytes()
    plots = sorted((tmp_path / "results").glob("*/plots/*.png"))
    assert [p.name for p in plots] == ["m-failure-rate.png", "m-tokens-per-s.png", "other-failure-rate.png"]
    images = [p.read_bytes() for p in plots]
    summary.write_text(summary.read_text().replace("generated tables\n", "generated tables\n\nKeep me.\n"))
    kept = summary.read_bytes()
    report.rebuild(stores, out)
    assert summary.read_bytes() == kept  # text outside the markers stays, the blocks are the same
    assert [p.read_bytes() for p in plots] == images
    assert out.read_text() == "# Report\n\nKeep me.\n"  # without the overview, REPORT.md is not touched
    text = first.decode()
    assert text.startswith("# `m`: generated tables\n")
    assert "| w:raw@p | 4/10 |" in text
    assert "](plots/m-failure-rate.png)" in text and "`python -m harness report --store results/m`" in text
    assert (tmp_path / "results" / "other" / report.SUMMARY_NAME).is_file()


def test_rebuild_with_an_unreadable_store_writes_nothing(tmp_path):
    from harness.stores.store import StoreError

    good = _store(tmp_path, "m", _records())
    bad = tmp_path / "results" / "bad"
    bad.mkdir(parents=True)
    (bad / "trials.jsonl").write_text("not json\n")
    out = tmp_path / "REPORT.md"
    out.write_text("# Report\n")
    with pytest.raises(StoreError):
        report.rebuild([good.root, bad], out)
    assert out.read_text() == "# Report\n"
    assert not (good.root / "plots").exists() and not (good.root / report.SUMMARY_NAME).exists()


def test_fisher_p_compares_each_strategy_with_raw_under_the_same_plan():
    cells = {c.cell: c for c in summarize(_records())}
    assert cells["w:raw@p"].fisher_p is None
    # P(no failure among the fix's trials | 4 failures in all): 0/10 vs 4/10 -> C(16,10)/C(20,10);
    # 0/5 vs 4/10 -> C(11,5)/C(15,5).
    assert cells["w:fix@p"].fisher_p == pytest.approx(8008 / 184756)
    assert cells["w:lock@p"].fisher_p == pytest.approx(462 / 3003)


def test_a_hang_signature_gets_one_dump_excerpt_from_its_stored_pyspy_json(tmp_path):
    import shutil
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "tracebacks" / "gpu_hang_flex_backward_compile" / "1.pyspy.json"
    store = _store(tmp_path, "m", [])
    hangs = []
    for i in range(2):
        r = _r("w:raw@-", i, Outcome.HANG, sig="hang-1")
        r.artefacts = f"/elsewhere/artefacts/t{i}"  # stored path of another machine: only the name counts
        (store.root / "artefacts" / f"t{i}").mkdir(parents=True)
        shutil.copy(fixture, store.root / "artefacts" / f"t{i}" / "pyspy.json")
        hangs.append(r)
    (excerpt,) = excerpts.hang_excerpts(hangs, store.root)
    summary, trial_id, text = excerpt
    assert trial_id == "m/w:raw@-/0" and summary == "summary of hang-1"
    assert "compile_fx_backward (torch/_inductor/compile_fx.py:2418)" in text
    assert "create_fw_bw_graph" in text  # the trace behind the blocked grad
    assert "tqdm_monitor" not in text and "InductorSubproc" not in text
    assert "Thread._bootstrap" not in text and "0x7f" not in text


def test_pivot_table_puts_strategies_down_and_workload_plans_across_with_families():
    def r(cell, i, outcome, summary=None):
        return TrialResult(
            trial_id=f"m/{cell}/{i}",
            cell=cell,
            trial_index=i,
            outcome=outcome,
            signature="k" if summary else None,
            signature_summary=summary,
        )

    f1 = "AssertionError in dflash-train at torch._inductor.cudagraph_trees:get_obj (empty message)"
    rs = [
        r("lb:raw@-", 0, Outcome.CRASH, f1),
        r("lb:raw@stages", 0, Outcome.CRASH, f1),
        r("gb:raw@-", 0, Outcome.RESOURCE, "torch.OutOfMemoryError in dflash-train at x"),
        r("lb:eager@-", 0, Outcome.OK),
        r("lb:eager@stages", 0, Outcome.OK),
        r("lb:eager@stages", 1, Outcome.HANG, "hang: a@x:lock_a, b@x:lock_b"),
    ]
    cells = summarize(rs)
    table = cell_tables.pivot_table(cells)
    assert table.splitlines()[0] == "| strategy | gb@- | lb@- | lb@stages |"
    assert "| raw | 0/0 +1 oom | 1/1 F1 | 1/1 F1 |" in table
    assert "| eager |  | 0/1 | 1/2 hang |" in table
    assert cell_tables.family_legend(cells)[0].startswith("F1: ")
    # One column: the flat table is enough.
    assert cell_tables.pivot_table([c for c in cells if c.workload == "gb"]) is None


def test_overview_counts_failure_families_per_torch_version_over_every_store(tmp_path):
    def r(matrix, i, outcome, summary, version):
        return record(
            f"{matrix}/c:raw@-/{i}",
            outcome=outcome,
            signature="k" if summary else None,
            signature_summary=summary,
            torch_version=version,
        )

    f1 = "AssertionError in t at torch._inductor.cudagraph_trees:get_obj (empty message)"
    fx = "fx-trace-of-dynamo-fn (RuntimeError in ? at torch._dynamo.eval_frame:compile_wrapper)"
    _store(
        tmp_path,
        "gpu",
        [
            r("gpu", 0, Outcome.CRASH, f1, "2.11.0"),
            r("gpu", 1, Outcome.OK, None, "2.11.0"),
            r("gpu", 2, Outcome.RESOURCE, "torch.OutOfMemoryError in x", "2.11.0"),
        ],
    )
    _store(
        tmp_path, "cpu", [r("cpu", 0, Outcome.CRASH, fx, "2.13.0+cpu"), r("cpu", 1, Outcome.CRASH, fx, "2.13.0+cpu")]
    )
    out = tmp_path / "REPORT.md"
    out.write_text("# Report\n")
    stores = discovery.default_stores(tmp_path / "results")
    assert report.OVERVIEW_BLOCK in report.rebuild(stores, out, overview=True)
    modes = tmp_path / "results" / report.FAILURE_MODES_NAME  # beside the stores, linked from REPORT
    text = modes.read_text()
    assert "Trials that count: torch 2.13.0+cpu: 2 trials; torch 2.11.0: 2 trials." in text
    assert "| F1 | " in text and "| - | 1 (gpu) |" in text
    assert "| F2 | " in text and "| 2 (cpu) | - |" in text
    assert report.OVERVIEW_BLOCK not in out.read_text() and "[REPORT.md](../REPORT.md)" in text
    # Without the flag (a --store subset) the overview is left as it was.
    modes.unlink()
    report.rebuild(stores[:1], out)
    assert not modes.exists()


def test_families_counts_only_the_stores_named_with_their_retired_records(tmp_path, capsys, monkeypatch):
    # REPORT's table of failure modes counts the trainer's failures apart from the repros'
    # (an F1 count there once took the repros' 40 in with the trainer's).
    from harness.cli import main
    from harness.stores.retire import retired_store

    f1 = "AssertionError in t at torch._inductor.cudagraph_trees:get_obj (empty message)"

    def r(matrix, i):
        return record(
            f"{matrix}/c:raw@-/{i}",
            Outcome.CRASH,
            signature="k",
            signature_summary=f1,
            torch_version="2.11.0",
        )

    trainer = _store(tmp_path, "trainer", [r("trainer", 0)])
    retired_store(trainer.root).append(r("trainer", 1))
    _store(tmp_path, "repros", [r("repros", 0), r("repros", 1), r("repros", 2)])
    monkeypatch.chdir(tmp_path)
    assert main(["families", "--store", "results/trainer"]) == 0
    out = capsys.readouterr().out
    assert "| F1 | " in out and "| 2 (trainer) |" in out
    assert out.splitlines()[-1] == "trials that count: torch 2.11.0: 2 trials"
    assert main(["families"]) == 0  # every store under results/
    assert "| 5 (repros, trainer) |" in capsys.readouterr().out
    assert main(["families", "--store", "results/nope"]) == 2
    assert capsys.readouterr().err.strip() == "error: no result store at results/nope (no trials.jsonl)"


def test_the_committed_report_is_what_the_committed_stores_regenerate(tmp_path):
    # The regenerated report matches the committed one: `python -m harness report`
    # on a copy of results/ (plots are rewritten there, not in the checkout).
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "results", tmp_path / "results", ignore=shutil.ignore_patterns("*.png"))
    out = tmp_path / "REPORT.md"
    shutil.copy(repo / "REPORT.md", out)
    shutil.copytree(repo / report.FINDINGS, tmp_path / report.FINDINGS)
    (tmp_path / "repro").mkdir()
    shutil.copy(repo / "repro" / "README.md", tmp_path / "repro" / "README.md")
    report.rebuild(discovery.default_stores(tmp_path / "results"), out, overview=True)
    generated = [
        "REPORT.md",
        *(str(p.relative_to(repo)) for p in sorted((repo / report.FINDINGS).glob("*.md"))),
        "repro/README.md",
        f"results/{report.BENCHES_NAME}",
        *(str(p.relative_to(repo)) for p in sorted(repo.glob(f"results/*/{report.SUMMARY_NAME}"))),
    ]
    assert len(generated) > 10
    for rel in generated:
        assert (tmp_path / rel).read_text() == (repo / rel).read_text(), (
            f"{rel} is not what `python -m harness report` makes of results/: rerun it and commit"
        )

    # Every plot the report writes is committed, and no stale one is left (names, not bytes: a
    # newer matplotlib may draw the same figure in other bytes, and CI installs the newest).
    def plots(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.glob("results/**/plots/*.png")}

    assert plots(tmp_path) == plots(repo), "plots differ from what `python -m harness report` writes: commit them"


def test_the_throughput_plot_tells_failing_cells_apart(tmp_path, monkeypatch):
    seen = {}

    def capture(plt, path, labels, values, err, xlabel, title, bar_text, *, colors=None):
        seen[path.name] = (labels, bar_text, colors)
        seen[path.name + ":err"] = dict(zip(labels, zip(*err))) if err else None
        return path

    monkeypatch.setattr(cell_plots, "bar_plot", capture)
    cell_plots.write_plots(summarize(_records()), "m", tmp_path)
    labels, text, colors = seen["m-tokens-per-s.png"]
    by_cell = dict(zip(labels, zip(text, colors)))
    # w:raw@p failed 4/10 but its 6 OK trials have a throughput: shown, in the failure colour.
    assert by_cell["w:raw@p"] == ("100 (4/10)", FAILED_COLOR)
    assert by_cell["w:fix@p"][1] == by_cell["w:lock@p"][1] == CLEAN_COLOR
    assert seen["m-failure-rate.png"][2] is None
    # Whiskers run from the slowest trial to the fastest: fix ran 80..89, median 84.5.
    assert seen["m-tokens-per-s.png:err"]["w:fix@p"] == pytest.approx((4.5, 4.5))
    assert seen["m-tokens-per-s.png:err"]["w:lock@p"] == (0.0, 0.0)
    assert {c.cell: c.tokens_range for c in summarize(_records())}["w:fix@p"] == (80.0, 89.0)


def test_the_grid_puts_strategies_down_and_workload_and_plan_across(tmp_path):
    # One (workload, plan) column: a grid would say nothing the bars do not.
    assert cell_plots.grid_layout(summarize(_records())) is None
    rs = _records() + [
        _r("w:raw@-", 0, Outcome.CRASH, sig="s1"),
        _r("v:fix@-", 0, Outcome.RESOURCE, sig="oom"),
        _r("v:fix@-", 1, Outcome.OK),
    ]
    cells = summarize(rs)
    grid = cell_plots.grid_layout(cells)
    assert grid.strategies == ["raw", "fix", "lock"]
    assert grid.columns == [("v", "-"), ("w", "-"), ("w", "p")]
    assert cell_plots.grid_text(grid.cells[("raw", ("w", "p"))]) == "4/10"
    assert cell_plots.grid_text(grid.cells[("fix", ("v", "-"))]) == "0/1\n+1 oom"
    assert cell_plots.grid_text(grid.cells.get(("lock", ("v", "-")))) == ""
    paths = cell_plots.plot_paths(cells, "m", tmp_path)
    assert [p.name for p in paths] == ["m-grid.png", "m-failure-rate.png", "m-tokens-per-s.png"]
    assert cell_plots.write_plots(cells, "m", tmp_path) == paths
    first = paths[0].read_bytes()
    assert first.startswith(b"\x89PNG")
    cell_plots.write_grid(grid, paths[0])
    assert paths[0].read_bytes() == first, "the grid is committed: the same records must give the same bytes"
