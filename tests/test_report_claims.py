"""Every count and price REPORT.md quotes outside its generated blocks, recomputed from results/:
a new trial or bench that moves one fails here until the text is brought up to date (the
diagnosis count is held by tests/test_diagnose.py)."""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

from harness.analysis import bench_records, benches, verdicts
from harness.analysis.crosstab import rows as crosstab_rows
from harness.analysis.prices import paired_ratios
from harness.analysis.summary import summarize
from harness.diagnosis.catalogue import load
from harness.stats import median_interval
from harness.stores.store import Store

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
REPORT = (ROOT / "REPORT.md").read_text(encoding="utf-8")
LOCK = "global-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync"
LB_RUN = "runs 58+59+60"
LOCK_FREE = (
    "cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init+single-thread-autograd"
    "+stash-incref+stream-sync+nested-fx-fallback"
)


@functools.cache
def totals(store: str) -> dict:
    records = [r for r in Store(RESULTS / store).load() if r.replay_of is None]
    return verdicts.totals(summarize(records))


def kn(store: str, workload: str, strategy: str, stressed: bool = True) -> str:
    t = totals(store)[workload][strategy]
    return f"{t.k}/{t.n} ({t.n_stressed})" if stressed else f"{t.k}/{t.n}"


@functools.cache
def price_runs() -> dict:
    runs = bench_records.load(bench_records.files(RESULTS))
    return {pr.name: pr for pr in benches.price_groups(runs)}


def price(run: str, strategy: str):
    return next(p for p in price_runs()[run].prices() if p.strategy == strategy)


def x(v: float) -> str:
    return f"{v:.2f}x"


def interval(m) -> str:
    return f"{m.coverage:.0%} interval {x(m.low)}-{x(m.high)}"


def rows_of_answer() -> list[str]:
    start = REPORT.index("## Which configuration, on which torch")
    return REPORT[start : REPORT.index("\n\n", REPORT.index("|---|", start))].splitlines()


def row(*words: str) -> str:
    found = [r for r in rows_of_answer() if all(w in r for w in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def test_the_launch_bound_row_is_what_the_campaign_and_its_priced_run_say():
    r = row("1 H200", "launch-bound")
    assert f"| {kn('gpu-campaign', 'launch-bound', LOCK)}, and {kn('gpu-exposure', 'launch-bound', LOCK)} probed |" in r
    run = price_runs()[LB_RUN]  # one price run, resumed in the next two GPU-host runs
    assert len({b.round for b in run.group}) == 5 and "5 paired rounds" in r
    lock = price(LB_RUN, LOCK)
    for name, words in (
        ("no-cudagraphs+global-lock+target-hook-taps", "`no-cudagraphs+global-lock+target-hook-taps`"),
        ("eager", "eager"),
    ):
        m = median_interval(paired_ratios(lock, price(LB_RUN, name)))
        assert f"{x(m.median)} {words} ({m.coverage:.0%} interval {x(m.low)}-{x(m.high)})" in r
    assert f"{statistics.median(lock.tokens):,.0f} tokens/s median" in r
    raw = price(LB_RUN, "raw")
    assert not raw.tokens and len(raw.died) == 5 and "raw died in 5 of 5 benches (F1)" in r
    assert all(load().family(d.split(": ", 1)[1]) == "F1" for d in raw.died)
    # The 3-round run of 2026-12-01 is still quoted, as such.
    old = price("run 35", "no-cudagraphs+global-lock")
    back = median_interval(paired_ratios(price("run 35", LOCK), old))
    assert f"gave {x(back.median)}; the 5-round run" in REPORT
    lo, hi = min(price("run 35", LOCK).tokens), max(price("run 35", LOCK).tokens)
    assert f"benched {lo:,.0f} to {hi:,.0f} tokens/s over the three rounds" in REPORT
    assert f"{(hi / lo - 1):.0%} apart" in REPORT
    assert f"{statistics.median(price('run 35', LOCK).tokens):,.0f} tokens/s median in the 3-round run" in REPORT


def test_the_launch_bound_cost_table_is_its_price_run():
    start = REPORT.index("**launch-bound** (torch 2.11.0+cu130, one H200")
    table = REPORT[start : REPORT.index("\n\n", REPORT.index("|---|", start))]
    by = {p.strategy: p for p in price_runs()[LB_RUN].prices()}
    lock = by[LOCK]
    assert (
        lock.timed_out == ["round 0"] and f"| 4/5, round 0 timed out | {statistics.median(lock.tokens):,.0f} |" in table
    )
    for name, cell in (
        ("no-cudagraphs+global-lock+target-hook-taps", "no-cudagraphs+global-lock"),
        ("eager", "eager"),
        ("eager@1", None),
    ):
        p = by[name]
        line = f"| {len(p.tokens)}/5 | {statistics.median(p.tokens):,.0f} | {x(p.ratio.median)} ({x(p.ratio.low)}-{x(p.ratio.high)}) | {statistics.median(p.gpu_busy):.0%} |"
        assert line in table, line
        if cell:
            assert f"{kn('gpu-campaign', 'launch-bound', cell)} |" in table
    assert f"| {kn('gpu-campaign', 'launch-bound', LOCK)} |" in table
    assert f"| {kn('gpu-campaign', 'launch-bound', 'raw', False)} |" in table
    assert "88% interval (4 rounds paired)" in REPORT and lock.ratio is None
    assert {p.ratio.coverage for p in by.values() if p.ratio} == {0.875}


LB_RUN2 = "runs 65+66"
UNLOCKED = LOCK + "+target-hook-taps+eager-target-unlocked"


def test_the_second_launch_bound_price_run_is_its_table():
    start = REPORT.index("**launch-bound, second run**")
    table = REPORT[start : REPORT.index("\n\n", REPORT.index("|---|", start))]
    run = price_runs()[LB_RUN2]  # one price run, resumed once
    assert run.preset == "launch-bound" and len({b.round for b in run.group}) == 5
    by = {p.strategy: p for p in run.prices()}
    assert set(by) == {LOCK, UNLOCKED, LOCK_FREE, "eager"}
    assert not any(p.died or p.timed_out for p in by.values())
    for name in (LOCK, UNLOCKED, LOCK_FREE, "eager"):
        p = by[name]
        ratio = "1.00x (base)" if p.ratio is None else f"{x(p.ratio.median)} ({x(p.ratio.low)}-{x(p.ratio.high)})"
        line = f"| 5/5 | {statistics.median(p.tokens):,.0f} | {ratio} | {statistics.median(p.gpu_busy):.0%} |"
        assert line in table, line
    assert {p.ratio.coverage for p in by.values() if p.ratio} == {0.9375}
    assert f"| {kn('gpu-exposure', 'launch-bound', UNLOCKED)} probed |" in table
    assert f"| {kn('gpu-campaign', 'launch-bound', LOCK_FREE)} |" in table
    assert f"| {kn('gpu-campaign', 'launch-bound', 'eager')} |" in table
    text = " ".join(REPORT.split())
    over_eager = {n: median_interval(paired_ratios(by[n], by["eager"])) for n in (LOCK, UNLOCKED, LOCK_FREE)}
    lock, unlocked, free = (over_eager[n] for n in (LOCK, UNLOCKED, LOCK_FREE))
    assert (
        f"Over eager: the recommended set {x(lock.median)} (94% interval {x(lock.low)}-{x(lock.high)}), "
        f"with `eager-target-unlocked` {x(unlocked.median)} ({x(unlocked.low)}-{x(unlocked.high)}), "
        f"the concurrent set {x(free.median)} ({x(free.low)}-{x(free.high)})"
    ) in text
    assert f"it ran {x(lock.median)} eager with three drafter threads" in text
    assert (
        f"{x(unlocked.median)} with `eager-target-unlocked`, whose interval, {x(unlocked.low)}-{x(unlocked.high)}, reaches it"
        in text
    )
    assert unlocked.high >= 1.5 > unlocked.median
    u = by[UNLOCKED].ratio
    assert f"(1.07x, 94% interval {x(u.low)}-{x(u.high)}); the drafters'" in text and x(u.median) == "1.07x"
    benched = [b for b in run.group if b.tokens_steady]

    def span(strategy: str, stage: str) -> str:
        vals = [b.busy[stage] for b in benched if b.strategy == strategy]
        return f"{min(vals):.0%}-{max(vals):.0%}"

    assert (
        f"the recommended set's target threads {span(LOCK, 'target')} and drafters {span(LOCK, 'drafter')}; "
        f"with `eager-target-unlocked` {span(UNLOCKED, 'target')} and {span(UNLOCKED, 'drafter')}; "
        f"the concurrent set {span(LOCK_FREE, 'target')} and {span(LOCK_FREE, 'drafter')}; "
        f"eager {span('eager', 'target')} and {span('eager', 'drafter')}"
    ) in text
    assert (
        f"{statistics.median(by[LOCK].tokens):,.0f} against {statistics.median(price(LB_RUN, LOCK).tokens):,.0f}"
        in text
    )


def test_the_launch_bound_busy_fractions_are_its_benches():
    runs = [b for b in price_runs()[LB_RUN].group if b.tokens_steady]

    def span(strategy: str, stage: str) -> str:
        vals = [b.busy[stage] for b in runs if b.strategy == strategy]
        return f"{min(vals):.0%}-{max(vals):.0%}"

    assert (
        f"the two target threads were busy {span(LOCK, 'target')}\n  of the run and the three drafters {span(LOCK, 'drafter')}"
        in REPORT
    )
    no_cg = "no-cudagraphs+global-lock+target-hook-taps"
    assert f"under the lock, {span(no_cg, 'target')} and\n  {span(no_cg, 'drafter')}" in REPORT
    assert f"eager, {span('eager', 'target')} and {span('eager', 'drafter')}" in REPORT


def test_the_gpu_default_row_is_what_the_phase_store_and_its_priced_run_say():
    r = row("1 H200", "gpu-default")
    assert (
        f"eager {kn('gpu-exposure', 'default', 'eager')}; `phase-lock+target-hook-taps` {kn('gpu-phase', 'default', 'phase-lock+target-hook-taps')} |"
        in r
    )
    run = price_runs()["runs 54+55"]  # one price run, resumed in the next GPU-host run
    assert len({b.round for b in run.group}) == 5 and "5 paired rounds" in r
    base = price("runs 54+55", "no-cudagraphs+target-hook-taps+global-lock")
    phase = price("runs 54+55", "no-cudagraphs+target-hook-taps+phase-lock")
    raw = price("runs 54+55", "no-cudagraphs")
    eager = price("runs 54+55", "eager")
    assert (
        f"{x(phase.ratio.median)} `global-lock+target-hook-taps` (94% interval {x(phase.ratio.low)}-{x(phase.ratio.high)})"
        in r
    )
    over_raw = median_interval(paired_ratios(phase, raw))
    assert f"{x(over_raw.median)} raw (94% interval {x(over_raw.low)}-{x(over_raw.high)})" in r
    e = median_interval(paired_ratios(eager, phase))
    assert f"eager runs {x(e.median)} `phase-lock+target-hook-taps` (94% interval {x(e.low)}-{x(e.high)})" in r
    assert f"eager {statistics.median(eager.tokens):,.0f} tokens/s median" in r
    assert base.tokens and not any(p.died for p in run.prices())  # every bench ran to a figure
    # The preset trains what the row recommends.
    from dflash import presets

    assert presets.get("gpu-default").compile.mode == "none"


def test_the_gpu_bound_row_is_what_the_campaign_and_its_priced_run_say():
    r = row("1 H200", "gpu-bound")
    assert f"| {kn('gpu-campaign', 'gpu-bound', 'eager')} |" in r
    eager, lock = price("run 34", "eager"), price("run 34", LOCK)
    assert f"{statistics.median(eager.tokens):,.0f} tokens/s" in r
    assert f"runs {x(lock.ratio.median)} eager ({interval(lock.ratio)}, 2 paired rounds)" in r


def test_the_four_gpu_and_cpu_rows_are_what_their_stores_say():
    r = row("4 H200s")
    assert f"`no-cudagraphs` {kn('gpu-topology-4', 'launch-bound', 'no-cudagraphs')}" in r
    clean = {s for s, t in totals("gpu-topology-4")["launch-bound"].items() if t.k == 0}
    assert all(s.startswith("no-cudagraphs") or s == "eager" for s in clean), clean
    r = row("2-core CPU", "tiny-cpu")
    assert {t.k for t in totals("cpu-trainer")["dflash-tiny"].values()} == {0}
    assert f"`raw` {kn('cpu-trainer', 'dflash-tiny', 'raw')}" in r
    taps = totals("cpu-target-taps")["tiny-ro"]
    assert (
        f"fails {taps['raw'].k}/{taps['raw'].n} (r19): `target-hook-taps` {taps['target-hook-taps'].k}/"
        f"{taps['target-hook-taps'].n}, `phase-lock` {kn('cpu-target-taps', 'tiny-ro', 'phase-lock')}"
    ) in r
    cpu_runs = [pr for pr in price_runs().values() if pr.preset == "cpu-compile"]
    cpu = [p for pr in cpu_runs for p in pr.prices() if p.strategy == "no-cudagraphs+global-lock"]
    assert "on `cpu-compile` the global lock " + ", ".join(x(p.ratio.median) for p in cpu) in r
    assert f"98% intervals {x(min(p.ratio.low for p in cpu))}-{x(max(p.ratio.high for p in cpu))}" in r
    assert {round(p.ratio.coverage, 2) for p in cpu} == {0.98}
    eager = [p for pr in cpu_runs for p in pr.prices() if p.strategy == "eager"]
    assert "eager runs " + ", ".join(x(p.ratio.median) for p in eager) + " the compiled trainer" in r
    # phase-lock over global-lock on tiny-ro: the price run of that workload (tiny-cpu + its --set's)
    ro = next(
        pr
        for pr in price_runs().values()
        if pr.preset == "tiny-cpu" and any(p.strategy == "phase-lock" for p in pr.prices())
    )
    by = {p.strategy: p for p in ro.prices()}
    m = median_interval(paired_ratios(by["phase-lock"], by["global-lock"]))
    assert f"which runs {x(m.median)} `global-lock` there ({interval(m)}, 5 paired rounds)" in r


def test_the_evidence_bullets_count_what_the_commands_print():
    g = totals("gpu-campaign")
    for w in ("launch-bound", "gpu-bound"):
        assert g[w]["global-lock"].k == g[w]["global-lock"].n == 20
    assert "plain `global-lock` 20/20 on each workload" in REPORT
    assert (
        f"`no-cudagraphs` hangs\n  (G2, a lazy backward compile against another thread's trace) in "
        f"{kn('gpu-campaign', 'launch-bound', 'no-cudagraphs', False)} launch-bound and "
        f"{kn('gpu-campaign', 'gpu-bound', 'no-cudagraphs', False)}"
    ) in REPORT
    assert (
        f"is {kn('gpu-campaign', 'launch-bound', LOCK_FREE).replace(' (', ' (').replace(')', ' stressed)')} on launch-bound"
        in REPORT
    )
    assert f"on gpu-bound it failed {kn('gpu-campaign', 'gpu-bound', LOCK_FREE, False).replace('/', '/')}" in REPORT
    lf = price("run 35", LOCK_FREE).ratio
    assert (
        f"runs\n  {x(lf.median)} the recommended lock configuration (75% interval {x(lf.low)}-{x(lf.high)})" in REPORT
    )
    loaded = [("gpu-campaign", Store(RESULTS / "gpu-campaign").load())]
    cst = crosstab_rows(
        loaded, "cstash-tls-init", frozenset({"segv", "segv-gc", "pybind-dealloc"}), [], ["stash-incref"]
    )[0]
    assert (
        f"with `cstash-tls-init` and no `stash-incref` {cst.k_with}/{cst.n_with} trials, against {cst.k_without}/{cst.n_without}"
        in REPORT
    )
    inc = crosstab_rows(loaded, "stash-incref", frozenset({"segv", "segv-gc"}), [], [])[0]
    assert f"`stash-incref` {inc.k_with}/{inc.n_with} against {inc.k_without}/{inc.n_without} without" in REPORT


def test_the_warm_up_table_is_what_the_logs_say():
    from harness.analysis import warmup

    logs = RESULTS / "h200-2026-12-02-warmup"
    base = warmup.read(logs / "eager3.log")
    start = REPORT.index("## What compiling costs before it pays")
    table = REPORT[start : REPORT.index("\n\n- ", start)]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    for line, name in zip(rows, ("eager3", "eager1", "rec3-cold", "rec3-warm", "ro1"), strict=True):
        run = warmup.read(logs / f"{name}.log")
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == str(run.drafter_threads), (name, cells)
        assert cells[2] == f"{run.first_step_s:.2f} s", (name, cells)
        assert cells[3] == f"{run.pace_tokens_per_s:,.0f}", (name, cells)
        assert cells[4] == f"{run.pace_tokens_per_s / base.pace_tokens_per_s:.2f}", (name, cells)
        even = warmup.break_even(run, base)
        assert cells[5] == ("base" if run is base or name == "eager3" else f"{even:,}"), (name, cells)
    cold = warmup.break_even(warmup.read(logs / "rec3-cold.log"), base)
    warm = warmup.break_even(warmup.read(logs / "rec3-warm.log"), base)
    assert f"pays off against eager after about {cold:,} steps" in REPORT and f"{warm:,} on a warm one" in REPORT


def test_the_pct_line_is_what_the_lift_measured():
    import json

    lift = json.loads((RESULTS / "lift-pct-cpu-2026-12-02" / "lift.json").read_text())
    cells = {(c["target"], c["profile"]): (c["k"], c["n"]) for c in lift["cells"]}
    for race in ("F2", "R5", "F3"):
        best = max((cells[(race, p)] for p in ("pct1", "pct2", "pct3")), key=lambda kn: kn[0] / kn[1])
        switch = cells[(race, "switch")]
        assert best[1] == switch[1] == 10
        line = f"{race} in {best[0]}/{best[1]}"
        assert line in REPORT.replace("\n  ", " "), line
        assert f"against {switch[0]}/{switch[1]}" in REPORT.replace("\n  ", " ")


def test_the_h200_pct_line_is_what_the_lift_measured():
    import json

    lift = json.loads((RESULTS / "lift-pct-h200-2026-12-02" / "lift.json").read_text())
    cells = {(c["target"], c["profile"]): (c["k"], c["n"]) for c in lift["cells"]}
    text = REPORT.replace("\n  ", " ")
    best = max((cells[("capture-r05", p)] for p in ("pct2", "pct3")), key=lambda kn: kn[0] / kn[1])
    switch, plain = cells[("capture-r05", "switch")], cells[("capture-r05", "plain")]
    assert (
        f"capture-r05 in {best[0]}/{best[1]} at best against {switch[0]}/{switch[1]} under `switch` (plain {plain[0]}/{plain[1]})"
        in text
    )
    for target in ("capture-r23", "G2"):
        assert cells[(target, "plain")] == (5, 5), target
    assert "capture-r23 and G2 already fail in 5/5 plain" in text


def test_the_versions_claim_holds_in_their_stores():
    # F2 gone on 2.14.1 and 2.15.0 while its window opened in every raw trial of r06 and r14.
    text = REPORT.replace("\n", " ")
    assert "window still opened in every 2.14.1 and 2.15.0 trial of r06 and r14" in text
    for version in ("2.14.1", "2.15.0"):
        records = Store(RESULTS / f"versions-cpu-torch{version}").load()
        for cell in ("r06:raw@fx-widen", "r14:raw@fx-widen"):
            mine = [r for r in records if r.cell == cell]
            assert len(mine) == 10 and not any(r.outcome.is_failure for r in mine), (version, cell)
            assert all((r.exposures or {}).get("F2", 0) > 0 for r in mine), (version, cell)


def test_the_windows_paragraph_is_what_the_probes_recorded():
    # The recommended cell's probed trials: race windows 0, the drafters' first-step window 2 each.
    cell = "global-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync@dflash-stages"
    records = Store(RESULTS / "gpu-campaign").load()
    probed = [r for r in records if r.cell == f"gpu-bound:{cell}" and r.exposures is not None]
    assert len(probed) == 2 and not any(r.outcome.is_failure for r in probed)
    for r in probed:
        assert all(r.exposures[w] == 0 for w in ("F1", "F1c", "capture", "G2")), r.exposures
        assert r.exposures["drafter-first-step"] == 2
    fixes = cell.split("@")[0]
    launch = [r for r in records if r.cell.startswith(f"launch-bound:{fixes}@")]
    assert len(launch) == 39 and all(r.exposures is None for r in launch)
    text = REPORT.replace("\n", " ")
    assert "opened the F1, F1c, capture and G2 windows 0 times in 2 of 2 trials" in text
    assert "Its 39 launch-bound trials predate the exposure probes" in text
    # The 29 probed launch-bound trials since: every race window shut, the first-step window open.
    later = [r for r in Store(RESULTS / "gpu-exposure").load() if r.cell == f"launch-bound:{cell}"]
    assert len(later) == 29 and not any(r.outcome.is_failure for r in later)
    assert all(v == 0 for r in later for w, v in r.exposures.items() if w != "drafter-first-step")
    assert all(r.exposures["drafter-first-step"] > 0 for r in later)
    first = sum(r.exposures["drafter-first-step"] for r in later)
    assert (
        f"R5: 0 of 29 trials) while the drafters' first compiled steps overlapped in 29 of 29 ({first} times)" in text
    )


def test_the_token_budget_table_is_its_store():
    start = REPORT.index("## Token-budget batches on the H200")
    table = REPORT[start : REPORT.index("\n\n", REPORT.index("|---|", start))]
    t = totals("gpu-batching")
    for workload, preset in (("default-tb", "gpu-default"), ("launch-bound-tb", "gpu-launch-bound")):
        for strategy, cell in t[workload].items():
            name = "raw" if strategy == "raw" else f"`{strategy}`"
            assert f"| {preset}, " in table and f"| {name} | {cell.k}/{cell.n} |" in table, (workload, strategy)
    assert t["launch-bound-tb"]["raw"].k == t["launch-bound-tb"]["raw"].n == 10
    raw = [r for r in Store(RESULTS / "gpu-batching").load() if r.cell.startswith("launch-bound-tb:raw")]
    families = [load().family(r.signature_summary) for r in raw]
    assert (families.count("F1"), families.count("G2")) == (9, 1)
    assert "| raw | 10/10 | F1 in 9: `AssertionError` in `cudagraph_trees:get_obj`; G2 in 1" in table
    hung = [
        r
        for r in Store(RESULTS / "gpu-batching").load()
        if r.cell.startswith("default-tb:raw") and r.outcome.is_failure
    ]
    assert len(hung) == 3 and {load().family(r.signature_summary) for r in hung} == {"G2"}
    assert "| raw | 3/10 | G2: all three hangs" in table


def test_the_r24_claim_is_what_its_stores_hold():
    # 2.13 from the catalogue store, 2.14.1 and 2.15.0 from the versions stores: raw failures as R4,
    # the lock clean, and R4's window openings summed over the raw trials.
    text = REPORT.replace("\n", " ")
    stores = {
        "2.13": RESULTS / "catalogue-cpu",
        "2.14.1": RESULTS / "versions-cpu-torch2.14.1",
        "2.15.0": RESULTS / "versions-cpu-torch2.15.0",
    }
    seen = {}
    for version, store in stores.items():
        records = Store(store).load()
        raw = [r for r in records if r.cell == "r24:raw@fx-widen"]
        fixed = [r for r in records if r.cell == "r24:global-lock@fx-widen"]
        k = sum("fx-module-not-submodule" in (r.signature or "") for r in raw)
        assert len(raw) == len(fixed) == 10 and not any(r.outcome.is_failure for r in fixed)
        seen[version] = (k, sum((r.exposures or {}).get("R4", 0) for r in raw))
    assert seen["2.13"][0] == 6 and seen["2.14.1"][0] == seen["2.15.0"][0] == 10
    assert "6/10 under fx-widen on 2.13, 10/10 on 2.14.1 and on 2.15.0" in text
    assert (
        f"The R4 window opened {seen['2.13'][1]} times in 10 trials on 2.13 and {seen['2.14.1'][1]:,} "
        f"and {seen['2.15.0'][1]:,} times on 2.14.1 and 2.15.0"
    ) in text


def test_the_batching_line_is_what_cpu_batching_holds():
    records = Store(RESULTS / "cpu-batching").load()

    def kn(cell):
        rs = [r for r in records if r.cell == cell]
        return sum(r.outcome.is_failure for r in rs), len(rs)

    for suffix in ("", "-tb"):
        assert kn(f"tiny{suffix}:raw@dflash-stages") == (0, 6)
        assert kn(f"tiny{suffix}:global-lock@dflash-stages") == (0, 6)
        assert kn(f"tiny-ro{suffix}:raw@-") == (6, 6)
        assert kn(f"tiny-ro{suffix}:target-hook-taps@-") == (0, 6)
    text = REPORT.replace("\n  ", " ")
    assert "stays 0/6 raw and 0/6 under `global-lock`, and with a compiled target fails 6/6 raw by r19 and 0/6" in text


def test_the_r26_claim_is_what_its_stores_hold():
    # Widened raw and await-thread-exit per torch; the bare cells (60 exits a trial) on 2.13.
    text = REPORT.replace("\n", " ")
    stores = {
        "2.13.0": (RESULTS / "catalogue-cpu", 29),
        "2.14.1": (RESULTS / "versions-cpu-torch2.14.1", 10),
        "2.15.0": (RESULTS / "versions-cpu-torch2.15.0", 10),
    }
    for version, (store, n_fix) in stores.items():
        records = Store(store).load()
        raw = [r for r in records if r.cell == "r26:raw@-"]
        fixed = [r for r in records if r.cell == "r26:await-thread-exit@-"]
        assert (
            sum("terminate called without an active exception" in (r.signature_summary or "") for r in raw)
            == len(raw)
            == 10
        ), version
        assert len(fixed) == n_fix and not any(r.outcome.is_failure for r in fixed), version
        assert {r.torch_version.split("+")[0] for r in raw + fixed} == {version}
    bare = [r for r in Store(RESULTS / "catalogue-cpu").load() if r.cell.startswith("r26-bare:raw@")]
    assert len(bare) == 20 and not any(r.outcome.is_failure for r in bare)
    spec = json.loads((ROOT / "harness" / "campaign" / "specs" / "catalogue-cpu.json").read_text())
    argv = spec["workloads"]["r26-bare"]["argv"]
    assert len(bare) * int(argv[argv.index("--rounds") + 1]) == 1200
    assert (
        "holds: 0/29 on 2.13.0, 0/10 on 2.14.1 and 2.15.0, against 10/10 raw on each" in text
        and "bare through the runner 0/20 trials (1,200 exits)" in text
    )
