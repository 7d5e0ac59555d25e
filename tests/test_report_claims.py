"""Every count and price REPORT.md quotes outside its generated blocks, recomputed from the committed
stores under results/: a new trial or bench that moves one fails here until the text is brought up
to date. The checks read the text with its line breaks folded (`TEXT`), so rewrapping a paragraph
moves nothing; a table is read row by row. Also: REPORT reads in five minutes (400 lines, the answer
first), and every file, anchor and spec it names exists and is committed."""

from __future__ import annotations

import functools
import gzip
import json
import re
import statistics
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness.analysis import bench_records, benches, verdicts
from harness.analysis.crosstab import rows as crosstab_rows
from harness.analysis.prices import paired_ratios
from harness.analysis.summary import summarize
from harness.diagnosis.catalogue import load
from harness.stats import median_interval
from harness.stores.store import Store
from tools import corpus as foreign

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
REPORT = (ROOT / "REPORT.md").read_text(encoding="utf-8")
PAGES = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs" / "findings").glob("*.md"))}
"""The evidence pages REPORT links to (docs/findings/): each claim is checked where it is made."""
DOCS = "\n".join([REPORT, *PAGES.values()])
TEXT = " ".join(DOCS.split())
"""REPORT and its evidence pages with every run of whitespace (line breaks and list indents) folded
to one space."""
LOCK = "global-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync"
LB_RUN = "runs 58+59+60"
LB_RUN2 = "runs 65+66"
GD_RUN = "runs 54+55"
UNLOCKED = LOCK + "+target-hook-taps+eager-target-unlocked"
LOCK_FREE = (
    "cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init+single-thread-autograd"
    "+stash-incref+stream-sync+nested-fx-fallback"
)
MAX_LINES = 400
ANSWER = "## The answer, per torch version and workload"
SITUATION = "## Your situation"


@functools.cache
def totals(store: str) -> dict:
    records = [r for r in Store(RESULTS / store).load() if r.replay_of is None]
    return verdicts.totals(summarize(records))


def kn(store: str, workload: str, strategy: str, stressed: bool = True) -> str:
    t = totals(store)[workload][strategy]
    return f"{t.k}/{t.n} ({t.n_stressed})" if stressed else f"{t.k}/{t.n}"


@functools.cache
def records(store: str) -> list:
    return [r for r in Store(RESULTS / store).load() if r.replay_of is None]


def cell_kn(store: str, cell: str) -> tuple[int, int]:
    mine = [r for r in records(store) if r.cell == cell]
    return sum(r.outcome.is_failure for r in mine), len(mine)


@functools.cache
def price_runs() -> dict:
    runs = bench_records.load(bench_records.files(RESULTS))
    return {pr.name: pr for pr in benches.price_groups(runs)}


def price(run: str, strategy: str):
    return next(p for p in price_runs()[run].prices() if p.strategy == strategy)


def over(run: str, a: str, b: str):
    """a's price over b's, paired by round: median and interval."""
    return median_interval(paired_ratios(price(run, a), price(run, b)))


def under(n: int) -> str:
    """The rule of three's 95% bound on a failure rate at 0 failures of n."""
    return f"under {3 / n:.1%}"


def x(v: float) -> str:
    return f"{v:.2f}x"


def interval(m) -> str:
    return f"{m.coverage:.0%} interval {x(m.low)}-{x(m.high)}"


def section(title: str) -> str:
    """The text of the `## title...` section, up to the next `## `."""
    start = DOCS.index(f"\n## {title}")
    end = min(i for i in (DOCS.find("\n## ", start + 1), DOCS.find("\n# ", start + 1), len(DOCS)) if i > 0)
    return DOCS[start:end]


def table_after(marker: str) -> str:
    """The first table after `marker`."""
    start = DOCS.index(marker)
    return DOCS[start : DOCS.index("\n\n", DOCS.index("|---|", start))]


def rows_of_answer() -> list[str]:
    return [line for line in table_after(ANSWER).splitlines() if line.startswith("| 2.")]


def row(*words: str) -> str:
    found = [r for r in rows_of_answer() if all(w in r for w in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def span(run: str, strategy: str, stage: str) -> str:
    vals = [b.busy[stage] for b in price_runs()[run].group if b.tokens_steady and b.strategy == strategy]
    return f"{min(vals):.0%}-{max(vals):.0%}"


# --- the shape: five minutes, the answer first ------------------------------------------------


def test_the_report_reads_in_five_minutes_with_the_answer_first():
    assert len(REPORT.splitlines()) <= MAX_LINES, len(REPORT.splitlines())
    first = REPORT.index("\n## ")
    assert REPORT[first:].startswith(f"\n{SITUATION}\n")
    assert REPORT.index(SITUATION) < REPORT.index("**Act on your own program**") < REPORT.index(ANSWER)
    assert len(REPORT.split()) <= 3000, len(REPORT.split())
    long = [line[:60] for line in REPORT.splitlines() if len(line) > 160 and not line.startswith("|")]
    assert not long, long


def test_the_reports_commands_name_real_fixes_and_plans():
    from harness.faults.profiles import PROFILES
    from harness.runtime.guard import Guard

    fixes = re.findall(r"--fix (\S+?)[`\s]", REPORT)
    plans = re.findall(r"--plan (\S+?)[`\s]", REPORT)
    assert len(fixes) >= 8 and plans
    for names in fixes:
        if names != "none":
            Guard(tuple(names.split(",")))  # raises on a name the registry does not hold
    assert set(plans) <= set(PROFILES), plans
    header = next(line for line in table_after(ANSWER).splitlines() if line.startswith("| torch"))
    for column in ("run this", "throughput against raw", "throughput against eager", "how sure", "store"):
        assert f"| {column} |" in header, header
    assert len(rows_of_answer()) >= 10
    # Each evidence section fits a screen or so; the generated blocks are not prose.
    generated = re.compile(r"<!-- harness:begin (\S+) -->.*?<!-- harness:end \1 -->", re.S)
    prose = generated.sub("", REPORT)
    for part in prose.split("\n## ")[2:]:
        assert len(part.splitlines()) <= 60, part.splitlines()[0]


def test_the_terms_are_defined_where_first_used():
    # "the concurrent set" is defined at its first use; every interval's coverage is explained.
    first = TEXT.lower().index("the concurrent set")
    assert TEXT[first:].startswith("The concurrent set is clean too, and buys nothing.** It is `" + LOCK_FREE + "`")
    # The intervals' coverage and the counts' form are read before the first row that uses them.
    legend = TEXT.index("How to read it.")
    assert "50%, 75%, 88%, 94% and 98% for 2, 3, 4, 5, 10 rounds" in TEXT[legend : legend + 900]
    assert "`k/n (s)`: k failing of n counted trials, s of them stressed" in TEXT[legend : legend + 200]
    assert "by the rule of three (3/n at 0 failures of n): 29 trials put it under about 10%" in TEXT
    assert under(29) == "under 10.3%"
    assert legend < TEXT.index("% interval") and legend < TEXT.index("| 2.11.0")
    glossary = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    assert "88% for 4" in " ".join(glossary.split()) and "**The concurrent set**" in glossary


def test_the_report_names_committed_files_and_valid_anchors_and_specs():
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--", "results", "docs", "examples", "repro", "tests", "harness"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    tracked = {p for p in tracked.split("\0") if p}
    cited = set(re.findall(r"\b((?:results|docs)/[A-Za-z0-9_.*/\-]*[A-Za-z0-9_*/])", DOCS))
    assert len(cited) > 40
    for path in sorted(cited):
        pattern = path.rstrip("/")
        hits = [p for p in tracked if p == pattern or p.startswith(pattern + "/") or Path(p).match(pattern)]
        if "*" in pattern:
            hits = [p for p in tracked if re.match(pattern.replace(".", r"\.").replace("*", r"[^/]*"), p)]
        assert hits, f"REPORT cites {path}, which is not committed"

    # Anchors: REPORT's own sections and the log's.
    def anchors(text: str) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", text, flags=re.M)
        return {re.sub(r"[^a-z0-9 \-]", "", h.lower()).replace(" ", "-") for h in heads}

    for path, text in [(ROOT / "REPORT.md", REPORT), *PAGES.items()]:
        for doc, anchor in re.findall(r"\]\(([^)#:]*\.md)?#([^)]+)\)", text):
            target = (path.parent / doc).resolve() if doc else path
            assert target.is_file(), f"{path.name} links {doc}, which does not exist"
            heads = text if not doc else target.read_text(encoding="utf-8")
            assert anchor in anchors(heads), f"{path.name}: {doc or path.name}#{anchor} is no heading"
    # The commands' spec files and scripts exist, and REPORT speaks of the project only.
    for spec in re.findall(r"spec:([\w/.\-]+\.json)", DOCS):
        assert (ROOT / spec).is_file(), spec
    for script in re.findall(r"\b((?:repro|examples|tools)/[\w/]+\.(?:py|sh))", DOCS):
        assert (ROOT / script).is_file(), script
    assert "../shared" not in DOCS
    assert not re.search(r"\b(sessions?|agents?|lease|device time)\b", DOCS, flags=re.I)
    assert not re.search(r"\bissue #?\d+", DOCS, flags=re.I)


# --- the answer's rows ----------------------------------------------------------------------


def test_the_launch_bound_row_is_what_the_campaign_and_its_two_priced_runs_say():
    r = row("1 H200", "launch-bound")
    camp, probed = totals("gpu-campaign")["launch-bound"][LOCK], totals("gpu-exposure")["launch-bound"][LOCK]
    assert camp.k == probed.k == 0
    both = camp.n + probed.n
    assert (
        f"| {kn('gpu-campaign', 'launch-bound', LOCK)}, and {kn('gpu-exposure', 'launch-bound', LOCK)} with every "
        f"race window measured shut: {under(both)} at 95% (0 of {both}); raw {kn('gpu-campaign', 'launch-bound', 'raw', False)} |"
    ) in r
    run = price_runs()[LB_RUN]  # one price run, resumed in the next two GPU-host runs
    assert len({b.round for b in run.group}) == 5
    e = over(LB_RUN, LOCK, "eager")
    assert e.coverage == 0.875 and f"{x(e.median)} eager ({interval(e)}, 4 paired rounds)" in r
    e2 = over(LB_RUN2, LOCK, "eager")
    assert len({b.round for b in price_runs()[LB_RUN2].group}) == 5
    assert f"{x(e2.median)} eager on a second host ({interval(e2)}, 5 paired rounds)" in r
    raw = price(LB_RUN, "raw")
    assert not raw.tokens and len(raw.died) == 5 and "raw died in 5 of 5 benches (F1)" in r
    assert all(load().family(d.split(": ", 1)[1]) == "F1" for d in raw.died)
    assert "(`fixes=recommended`, the preset's default)" in r


def test_the_gpu_default_rows_are_what_the_stores_and_the_priced_run_say():
    eager_row = row("1 H200", "gpu-default: ")
    e_raw = over(GD_RUN, "eager", "no-cudagraphs")
    assert f"| {x(e_raw.median)} raw ({interval(e_raw)}), and raw hangs under stress (G2) |" in eager_row
    assert f"{statistics.median(price(GD_RUN, 'eager').tokens):,.0f} tokens/s median" in eager_row
    eager = totals("gpu-exposure")["default"]["eager"]
    assert eager.k == 0 and f"| {kn('gpu-exposure', 'default', 'eager')}: {under(eager.n)} |" in eager_row
    phase_row = row("1 H200", "gpu-default, compiled")
    phase = "no-cudagraphs+target-hook-taps+phase-lock"
    p_raw = over(GD_RUN, phase, "no-cudagraphs")
    assert f"| {x(p_raw.median)} raw ({interval(p_raw)}) |" in phase_row
    e = over(GD_RUN, "eager", phase)
    assert f"eager runs {x(e.median)} it ({interval(e)})" in phase_row
    n = totals("gpu-phase")["default"]["phase-lock+target-hook-taps"].n
    assert (
        f"| {kn('gpu-phase', 'default', 'phase-lock+target-hook-taps')}: {under(n)}; "
        f"raw {kn('gpu-phase', 'default', 'raw', False)} (G2) |"
    ) in phase_row
    cg = totals("gpu-phase")["launch-bound"]["phase-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync"]
    assert cg.k == cg.n == 5 and "never beside CUDA graphs: 5/5 failed" in phase_row
    assert all(p.tokens and not p.died for p in price_runs()[GD_RUN].prices())  # every bench ran to a figure
    from dflash import presets

    assert presets.get("gpu-default").compile.mode == "none"  # the preset trains what the row says


def test_the_gpu_bound_row_is_what_the_campaign_and_its_priced_run_say():
    r = row("1 H200", "gpu-bound")
    n = totals("gpu-campaign")["gpu-bound"]["eager"].n
    assert f"| {kn('gpu-campaign', 'gpu-bound', 'eager')}: {under(n)} |" in r
    assert f"raw fails {kn('gpu-campaign', 'gpu-bound', 'raw', False)}" in r
    eager, lock = price("run 34", "eager"), price("run 34", LOCK)
    assert f"{statistics.median(eager.tokens):,.0f} tokens/s" in r
    assert f"runs {x(lock.ratio.median)} eager ({interval(lock.ratio)}, 2 paired rounds)" in r


def test_the_four_gpu_and_cpu_trainer_rows_are_what_their_stores_say():
    r = row("4 H200s")
    n = totals("gpu-topology-4")["launch-bound"]["no-cudagraphs"].n
    assert (
        f"`no-cudagraphs` {kn('gpu-topology-4', 'launch-bound', 'no-cudagraphs')}: {under(n)}, short of the rule's 29"
        in r
    )
    t4 = totals("gpu-topology-4")["launch-bound"]
    clean = {s for s, t in t4.items() if t.k == 0}
    assert all(s.startswith("no-cudagraphs") or s == "eager" for s in clean), clean
    assert all(t.n_stressed < 29 for s, t in t4.items() if s in clean)  # "nothing qualifies yet"
    assert LOCK not in t4  # "the recommended one was not run there"
    r = row("2-core CPU", "tiny-cpu")
    assert {t.k for t in totals("cpu-trainer")["dflash-tiny"].values()} == {0}
    n = totals("cpu-trainer")["dflash-tiny"]["raw"].n
    assert f"raw {kn('cpu-trainer', 'dflash-tiny', 'raw')}: {under(n)}; every strategy 0/9" in r
    cpu_runs = [pr for pr in price_runs().values() if pr.preset == "cpu-compile"]
    cpu = [p for pr in cpu_runs for p in pr.prices() if p.strategy == "no-cudagraphs+global-lock"]
    assert "on `cpu-compile` the global lock " + ", ".join(x(p.ratio.median) for p in cpu) + " raw" in r
    assert f"98% intervals {x(min(p.ratio.low for p in cpu))}-{x(max(p.ratio.high for p in cpu))}" in r
    assert {round(p.ratio.coverage, 2) for p in cpu} == {0.98} and "10 paired rounds each" in r
    eager = [p for pr in cpu_runs for p in pr.prices() if p.strategy == "eager"]
    assert "eager runs " + ", ".join(x(p.ratio.median) for p in eager) + " the compiled trainer" in r
    r = row("2-core CPU", "tiny-ro")
    taps = totals("cpu-target-taps")["tiny-ro"]
    assert f"raw fails {taps['raw'].k}/{taps['raw'].n} (r19)" in r
    assert (
        f"`target-hook-taps` {taps['target-hook-taps'].k}/{taps['target-hook-taps'].n}, `phase-lock` "
        f"{kn('cpu-target-taps', 'tiny-ro', 'phase-lock')}: {under(taps['phase-lock'].n)} |"
    ) in r
    # phase-lock over global-lock on tiny-ro: the price run of that workload (tiny-cpu + its --set's)
    ro = next(
        pr
        for pr in price_runs().values()
        if pr.preset == "tiny-cpu" and any(p.strategy == "phase-lock" for p in pr.prices())
    )
    by = {p.strategy: p for p in ro.prices()}
    m = median_interval(paired_ratios(by["phase-lock"], by["global-lock"]))
    assert f"`phase-lock` runs {x(m.median)} `global-lock` there ({interval(m)}, 5 paired rounds)" in r
    assert f"`phase-lock` runs {x(m.median)} `global-lock`, a wide interval" in TEXT


def test_the_r29_row_and_section_are_what_the_versions_stores_say():
    r = row("2.11.0 CUDA wheel")
    assert cell_kn("versions-cpu-torch2.11.0", "r29:raw@-") == (10, 10)
    assert cell_kn("versions-cpu-torch2.11.0", "r29:pin-fake-cuda-guard@-") == (0, 10)
    assert f"raw 10/10 segfaults, fix 0/10 (r29): {under(10)};" in r
    later = ("versions-cpu-torch2.12.1", "catalogue-cpu", "versions-cpu-torch2.14.1", "versions-cpu-torch2.15.0")
    for store in later:
        assert cell_kn(store, "r29:raw@-") == (0, 10), store
        assert cell_kn(store, "r29:pin-fake-cuda-guard@-") == (0, 10), store
    assert "raw 10/10 on 2.11.0, 0/10 on 2.12.1, 2.13.0+cpu, 2.14.1 and 2.15.0" in TEXT
    wheels = (RESULTS / "r29-cuda-wheels-2026-12-03.txt").read_text()
    for version in ("2.12.0+cu130", "2.13.0+cu130"):
        runs = re.findall(rf"run \d+: exit (\d+); NOT REPRODUCED \(.*torch {re.escape(version)}", wheels)
        assert runs == ["0"] * 10, version
    assert "the 2.12.0 and 2.13.0 CUDA wheels ran the repro directly, 10 times each, every run exiting 0" in TEXT


def test_the_fake_guard_count_is_the_2_11_store():
    # r08, r11, r17 and r25 died of fake-guard-exit on the 2-core machine; r29's own 10 are apart.
    family = load().family
    died = {}
    for r in records("versions-cpu-torch2.11.0"):
        if r.outcome.is_failure and family(r.signature_summary) == "fake-guard-exit":
            rid = r.cell.split(":")[0]
            died[rid] = died.get(rid, 0) + 1
    assert set(died) == {"r08", "r11", "r17", "r25", "r29"}, died
    others = sum(n for rid, n in died.items() if rid != "r29")
    assert others == 28 and died["r29"] == 10
    assert TEXT.count(f"{others} trials of r08, r11, r17 and r25") == 1
    assert f"{others} trials of four unrelated repros (r08, r11, r17, r25)" in TEXT
    assert f"r29 was written for it ({died['r29']} trials more)" in TEXT
    # The 2.11 column's other figures quoted in the versions paragraph.
    assert cell_kn("versions-cpu-torch2.11.0", "r24:raw@fx-widen") == (7, 10)
    r08 = [r for r in records("versions-cpu-torch2.11.0") if r.cell == "r08:raw@switch" and r.outcome.is_failure]
    assert sum(family(r.signature_summary) == "F4" for r in r08) == 3
    for rid in ("r17", "r25"):
        assert cell_kn("versions-cpu-torch2.11.0", f"{rid}:pin-fake-cuda-guard@switch") == (0, 10)
    assert "F4 (r08) reproduces 3/10" in TEXT and "r24 fails by R4 7/10" in TEXT
    assert "with the fake guard pinned r17 and r25 run 0/10 each" in TEXT


def test_the_tracing_row_is_what_the_stores_and_the_corpus_say():
    r = row("a compiled call while another thread traces")
    raw = [
        cell_kn(s, "r24:raw@fx-widen")[0]
        for s in ("catalogue-cpu", "versions-cpu-torch2.14.1", "versions-cpu-torch2.15.0")
    ]
    for s in ("catalogue-cpu", "versions-cpu-torch2.14.1", "versions-cpu-torch2.15.0"):
        assert cell_kn(s, "r24:global-lock@fx-widen") == (0, 10), s
    assert (
        f"r24 under `global-lock` 0/10 on each torch (raw {raw[0]}/10, {raw[1]}/10, {raw[2]}/10): {under(30)} (0 of 30)"
        in r
    )
    fixes = json.loads((RESULTS / "corpus" / "cpu-fixes-torch2.13.0-2026-12-04.json").read_text())
    ex = next(f for f in fixes["fixes"] if f["name"] == "serve_while_tracing_example")
    assert ex["fix"] == "nested-fx-fallback" and fixes["torch"].startswith("2.13.0")
    assert f"the example raw {ex['raw']}, `nested-fx-fallback` {ex['fixed']} (2.13)" in r
    assert (
        f"failed {ex['raw_failed']} of {ex['raw_runs']} runs raw (F2) and {ex['fixed_failed']} of "
        f"{ex['fixed_runs']} under `nested-fx-fallback`"
    ) in TEXT
    assert "F2 3" in ex["rows"][0]
    assert cell_kn("catalogue-cpu", "r06:nested-fx-fallback@fx-widen") == (0, 29)


def test_the_exit_row_is_what_the_stores_say():
    r = row("joined before exit")
    fixed = [
        cell_kn(s, "r26:await-thread-exit@-")
        for s in ("catalogue-cpu", "versions-cpu-torch2.14.1", "versions-cpu-torch2.15.0")
    ]
    assert all(k == 0 for k, _ in fixed)
    n = sum(n for _, n in fixed)
    assert f"{', '.join(f'0/{n}' for _, n in fixed)} against raw 10/10 on each (r26): {under(n)} (0 of {n})" in r


# --- the evidence sections ----------------------------------------------------------------------


def test_the_launch_bound_cost_table_is_its_price_run():
    table = table_after("**First run**")
    by = {p.strategy: p for p in price_runs()[LB_RUN].prices()}
    lock = by[LOCK]
    assert lock.timed_out == ["round 0"] and lock.ratio is None
    assert (
        f"| 4/5 | {statistics.median(lock.tokens):,.0f} | 1.00x (base) | {statistics.median(lock.gpu_busy):.0%} |"
        in table
    )
    assert "its first bench, on a cold Inductor cache, was still autotuning under the lock at the 150 s limit" in TEXT
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
    assert "88% intervals (4 rounds paired" in TEXT
    assert {p.ratio.coverage for p in by.values() if p.ratio} == {0.875}
    for name, words in (
        ("no-cudagraphs+global-lock+target-hook-taps", "`no-cudagraphs+global-lock+target-hook-taps`"),
        ("eager", "eager"),
    ):
        m = over(LB_RUN, LOCK, name)
        assert f"{x(m.median)} {words} ({interval(m)})" in TEXT
    # The 3-round run of 2026-12-01 is still quoted, as such.
    back = over("run 35", LOCK, "no-cudagraphs+global-lock")
    assert (
        f"It gave {x(back.median)} the lock without CUDA graphs, the 5-round run {x(over(LB_RUN, LOCK, 'no-cudagraphs+global-lock+target-hook-taps').median)}"
        in TEXT
    )
    tokens = price("run 35", LOCK).tokens
    lo, hi = min(tokens), max(tokens)
    assert (
        f"benched the set at {statistics.median(tokens):,.0f} tokens/s median and {lo:,.0f} to {hi:,.0f} over its rounds, {(hi / lo - 1):.0%} apart"
        in TEXT
    )


def test_the_launch_bound_busy_fractions_are_its_benches():
    no_cg = "no-cudagraphs+global-lock+target-hook-taps"
    assert (
        f"its two target threads {span(LB_RUN, LOCK, 'target')} of the run and its three drafters "
        f"{span(LB_RUN, LOCK, 'drafter')}; without CUDA graphs under the lock, {span(LB_RUN, no_cg, 'target')} and "
        f"{span(LB_RUN, no_cg, 'drafter')}; eager, {span(LB_RUN, 'eager', 'target')} and {span(LB_RUN, 'eager', 'drafter')}"
    ) in TEXT


def test_the_second_launch_bound_price_run_is_its_table():
    table = table_after("**Second run**")
    run = price_runs()[LB_RUN2]  # one price run, resumed once
    assert run.preset == "launch-bound" and len({b.round for b in run.group}) == 5
    by = {p.strategy: p for p in run.prices()}
    assert set(by) == {LOCK, UNLOCKED, LOCK_FREE, "eager"} and "four configurations" in TEXT
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
    lock, unlocked, free = (over(LB_RUN2, n, "eager") for n in (LOCK, UNLOCKED, LOCK_FREE))
    assert (
        f"Over eager: the recommended set {x(lock.median)} (94% interval {x(lock.low)}-{x(lock.high)}), "
        f"with `eager-target-unlocked` {x(unlocked.median)} ({x(unlocked.low)}-{x(unlocked.high)}), "
        f"the concurrent set {x(free.median)} ({x(free.low)}-{x(free.high)})"
    ) in TEXT
    assert (
        f"{x(unlocked.median)} with `eager-target-unlocked`, whose interval, {x(unlocked.low)}-{x(unlocked.high)}, reaches it"
        in TEXT
    )
    assert unlocked.high >= 1.5 > max(lock.median, unlocked.median, over(LB_RUN, LOCK, "eager").median)
    u = by[UNLOCKED].ratio
    assert f"({x(u.median)}, 94% interval {x(u.low)}-{x(u.high)}): the drafters'" in TEXT
    assert (
        f"the recommended set's target threads {span(LB_RUN2, LOCK, 'target')} and drafters {span(LB_RUN2, LOCK, 'drafter')}; "
        f"with `eager-target-unlocked` {span(LB_RUN2, UNLOCKED, 'target')} and {span(LB_RUN2, UNLOCKED, 'drafter')}; "
        f"the concurrent set {span(LB_RUN2, LOCK_FREE, 'target')} and {span(LB_RUN2, LOCK_FREE, 'drafter')}; "
        f"eager {span(LB_RUN2, 'eager', 'target')} and {span(LB_RUN2, 'eager', 'drafter')}"
    ) in TEXT
    assert (
        f"{statistics.median(by[LOCK].tokens):,.0f} against {statistics.median(price(LB_RUN, LOCK).tokens):,.0f} tokens/s"
        in TEXT
    )


def test_the_gpu_default_cost_table_is_its_price_run():
    table = table_after("**Price**: torch 2.11.0+cu130")
    by = {p.strategy: p for p in price_runs()[GD_RUN].prices()}
    base = "no-cudagraphs+target-hook-taps+global-lock"
    assert by[base].ratio is None
    for name in (base, "no-cudagraphs+target-hook-taps+phase-lock", "no-cudagraphs", "eager", "eager@1"):
        p = by[name]
        ratio = "1.00x (base)" if p.ratio is None else f"{x(p.ratio.median)} ({x(p.ratio.low)}-{x(p.ratio.high)})"
        line = f"| 5/5 | {statistics.median(p.tokens):,.0f} | {ratio} | {statistics.median(p.gpu_busy):.0%} |"
        assert line in table, line
    assert {p.ratio.coverage for p in by.values() if p.ratio} == {0.9375}
    phase = "no-cudagraphs+target-hook-taps+phase-lock"
    p_raw, e_phase, e_raw = (
        over(GD_RUN, phase, "no-cudagraphs"),
        over(GD_RUN, "eager", phase),
        over(GD_RUN, "eager", "no-cudagraphs"),
    )
    assert (
        f"`phase-lock` over raw {x(p_raw.median)} ({x(p_raw.low)}-{x(p_raw.high)}); eager over `phase-lock` "
        f"{x(e_phase.median)} ({x(e_phase.low)}-{x(e_phase.high)}); eager over raw {x(e_raw.median)} ({x(e_raw.low)}-{x(e_raw.high)})"
    ) in TEXT


def test_the_gpu_default_first_steps_are_the_benches_phases():
    rows = [json.loads(line) for line in (RESULTS / "h200-campaign" / "benches.jsonl").read_text().splitlines() if line]
    benched = [r for r in rows if r.get("call") in (54, 55) and r["phase"].startswith("bench:default:")]
    assert len(benched) == 25
    eager = [r["phases"] for r in benched if r["phase"].split(":", 2)[2].startswith(":none")]
    compiled = sorted(
        (r for r in benched if not r["phase"].split(":", 2)[2].startswith(":none")),
        key=lambda r: (r["call"], r["round"]),
    )
    cold, warm = compiled[0]["phases"], [r["phases"] for r in compiled[1:]]
    assert cold["first_step"] == max(p["first_step"] for p in warm + [cold])  # the run's first bench is the cold one

    def rng(vals, unit: str = " s") -> str:
        return f"{min(vals):.1f}-{max(vals):.1f}{unit}"

    assert (
        f"eager's first step took {min(p['first_step'] for p in eager):.1f}-{max(p['first_step'] for p in eager):.1f} s "
        f"(it came {rng([p['first_step_at'] for p in eager])} into the process)"
    ) in TEXT
    fast = [p for p in warm if p["first_step"] < 20]
    slow = sorted(p["first_step"] for p in warm if p["first_step"] >= 20)
    assert len(warm) == 14 and len(fast) == 12 and len(slow) == 2
    assert (
        f"it took {rng([p['first_step'] for p in fast])} in {len(fast)} of {len(warm)} benches (first step at "
        f"{rng([p['first_step_at'] for p in fast])}) and {slow[0]:.1f} s and {slow[1]:.1f} s in the other two; on the "
        f"run's first, cold bench {cold['first_step']:.1f} s (first step at {cold['first_step_at']:.1f} s)"
    ) in TEXT


def test_the_evidence_bullets_count_what_the_commands_print():
    g = totals("gpu-campaign")
    for w in ("launch-bound", "gpu-bound"):
        assert g[w]["global-lock"].k == g[w]["global-lock"].n == 20
    assert "Plain `global-lock` failed 20/20 on each workload" in TEXT
    assert (
        f"`no-cudagraphs` hangs (G2, a lazy backward compile against another thread's trace) in "
        f"{kn('gpu-campaign', 'launch-bound', 'no-cudagraphs', False)} launch-bound and "
        f"{kn('gpu-campaign', 'gpu-bound', 'no-cudagraphs', False)} gpu-bound trials"
    ) in TEXT
    assert f"{kn('gpu-campaign', 'launch-bound', LOCK_FREE).replace(')', ' stressed)')} on launch-bound" in TEXT
    assert f"on gpu-bound it failed {kn('gpu-campaign', 'gpu-bound', LOCK_FREE, False)}" in TEXT
    lf = price("run 35", LOCK_FREE).ratio
    assert f"{x(lf.median)} the recommended set (75% interval {x(lf.low)}-{x(lf.high)}, 3 paired rounds" in TEXT
    loaded = [("gpu-campaign", Store(RESULTS / "gpu-campaign").load())]
    cst = crosstab_rows(
        loaded, "cstash-tls-init", frozenset({"segv", "segv-gc", "pybind-dealloc"}), [], ["stash-incref"]
    )[0]
    assert (
        f"with `cstash-tls-init` and no `stash-incref`: {cst.k_with}/{cst.n_with} trials, against {cst.k_without}/{cst.n_without}"
        in TEXT
    )
    inc = crosstab_rows(loaded, "stash-incref", frozenset({"segv", "segv-gc"}), [], [])[0]
    assert f"`stash-incref` {inc.k_with}/{inc.n_with} against {inc.k_without}/{inc.n_without} without" in TEXT


def test_the_warm_up_table_is_what_the_logs_say():
    from harness.analysis import warmup

    logs = RESULTS / "h200-2026-12-02-warmup"
    base = warmup.read(logs / "eager3.log")
    table = table_after("## What compiling costs before it pays")
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
    assert (
        f"pays off against eager after about {cold:,} steps on a cold Inductor cache and {warm:,} on a warm one" in TEXT
    )


def test_the_pct_line_is_what_the_lift_measured():
    lift = json.loads((RESULTS / "lift-pct-cpu-2026-12-02" / "lift.json").read_text())
    cells = {(c["target"], c["profile"]): (c["k"], c["n"]) for c in lift["cells"]}
    for race in ("F2", "R5", "F3"):
        best = max((cells[(race, p)] for p in ("pct1", "pct2", "pct3")), key=lambda kn: kn[0] / kn[1])
        switch = cells[(race, "switch")]
        assert best[1] == switch[1] == 10
        assert f"{race} in {best[0]}/{best[1]}" in TEXT, race
        assert f"against {switch[0]}/{switch[1]}" in TEXT


def test_the_h200_pct_line_is_what_the_lift_measured():
    lift = json.loads((RESULTS / "lift-pct-h200-2026-12-02" / "lift.json").read_text())
    cells = {(c["target"], c["profile"]): (c["k"], c["n"]) for c in lift["cells"]}
    best = max((cells[("capture-r05", p)] for p in ("pct2", "pct3")), key=lambda kn: kn[0] / kn[1])
    switch, plain = cells[("capture-r05", "switch")], cells[("capture-r05", "plain")]
    assert (
        f"capture-r05 in {best[0]}/{best[1]} at best against {switch[0]}/{switch[1]} under `switch` (plain {plain[0]}/{plain[1]})"
        in TEXT
    )
    for target in ("capture-r23", "G2"):
        assert cells[(target, "plain")] == (5, 5), target
    assert "capture-r23 and G2 already fail in 5/5 plain" in TEXT


def test_the_versions_claim_holds_in_their_stores():
    # F2 gone on 2.14.1 and 2.15.0 while its window opened in every raw trial of r06 and r14.
    assert "F2's window still opened in every 2.14.1 and 2.15.0 trial of r06 and r14" in TEXT
    for version in ("2.14.1", "2.15.0"):
        for cell in ("r06:raw@fx-widen", "r14:raw@fx-widen"):
            mine = [r for r in records(f"versions-cpu-torch{version}") if r.cell == cell]
            assert len(mine) == 10 and not any(r.outcome.is_failure for r in mine), (version, cell)
            assert all((r.exposures or {}).get("F2", 0) > 0 for r in mine), (version, cell)


def test_the_windows_paragraph_is_what_the_probes_recorded():
    # The recommended cell's probed trials: race windows 0, the drafters' first-step window 2 each.
    cell = f"{LOCK}@dflash-stages"
    campaign = Store(RESULTS / "gpu-campaign").load()
    probed = [r for r in campaign if r.cell == f"gpu-bound:{cell}" and r.exposures is not None]
    assert len(probed) == 2 and not any(r.outcome.is_failure for r in probed)
    for r in probed:
        assert all(r.exposures[w] == 0 for w in ("F1", "F1c", "capture", "G2")), r.exposures
        assert r.exposures["drafter-first-step"] == 2
    launch = [r for r in campaign if r.cell.startswith(f"launch-bound:{LOCK}@")]
    assert len(launch) == 39 and all(r.exposures is None for r in launch)
    assert "opened the F1, F1c, capture and G2 windows 0 times in 2 of 2 trials" in TEXT
    assert "Its 39 launch-bound trials predate the exposure probes" in TEXT
    # The 29 probed launch-bound trials since: every race window shut, the first-step window open.
    later = [r for r in records("gpu-exposure") if r.cell == f"launch-bound:{cell}"]
    assert len(later) == 29 and not any(r.outcome.is_failure for r in later)
    assert all(v == 0 for r in later for w, v in r.exposures.items() if w != "drafter-first-step")
    assert all(r.exposures["drafter-first-step"] > 0 for r in later)
    first = sum(r.exposures["drafter-first-step"] for r in later)
    assert (
        f"R5: 0 of 29 trials) while the drafters' first compiled steps overlapped in 29 of 29 ({first} times)" in TEXT
    )
    # Raw with token-budget batches: F1's window and the failures.
    raw = [r for r in records("gpu-batching") if r.cell.startswith("launch-bound-tb:raw")]
    opened = sum((r.exposures or {}).get("F1", 0) > 0 for r in raw)
    failed = sum(r.outcome.is_failure for r in raw)
    assert f"opened F1's window in {opened} of {len(raw)} trials and failed in {failed} of {len(raw)}" in TEXT
    # gpu-default under phase-lock: F10 and G2 shut, the first steps overlapping; raw's windows.
    phase = [r for r in records("gpu-phase") if r.cell.startswith("default:phase-lock+target-hook-taps@")]
    raw = [r for r in records("gpu-phase") if r.cell.startswith("default:raw@")]
    assert not any(r.exposures["F10"] or r.exposures["G2"] for r in phase)
    overlapped = sum(r.exposures["drafter-first-step"] > 0 for r in phase)
    assert (
        f"under `phase-lock` F10 0 of {len(phase)} and G2 0 of {len(phase)}, the drafters' first steps overlapping in {overlapped} of {len(phase)}"
        in TEXT
    )
    f10, g2 = (sum(r.exposures[w] > 0 for r in raw) for w in ("F10", "G2"))
    assert f"Raw opened F10's window in {f10} of {len(raw)} trials and G2's in {g2}" in TEXT
    cg = [r for r in records("gpu-phase") if r.cell.startswith("launch-bound:phase-lock")]
    assert len(cg) == 5 and all(r.outcome.is_failure and r.exposures["F1c"] > 0 for r in cg)
    assert "failed 5 of 5 stressed trials (F1c, window open in 5 of 5)" in TEXT


def test_the_token_budget_table_is_its_store():
    table = table_after("## Token-budget batches on the H200")
    t = totals("gpu-batching")
    for workload, preset in (("default-tb", "gpu-default"), ("launch-bound-tb", "gpu-launch-bound")):
        for strategy, cell in t[workload].items():
            name = "raw" if strategy == "raw" else f"`{strategy}`"
            assert f"| {preset}, " in table and f"| {name} | {cell.k}/{cell.n} |" in table, (workload, strategy)
    assert t["launch-bound-tb"]["raw"].k == t["launch-bound-tb"]["raw"].n == 10
    raw = [r for r in records("gpu-batching") if r.cell.startswith("launch-bound-tb:raw")]
    families = [load().family(r.signature_summary) for r in raw]
    assert (families.count("F1"), families.count("G2")) == (9, 1)
    assert "| raw | 10/10 | F1 in 9: `AssertionError` in `cudagraph_trees:get_obj`; G2 in 1 |" in table
    hung = [r for r in records("gpu-batching") if r.cell.startswith("default-tb:raw") and r.outcome.is_failure]
    assert len(hung) == 3 and {load().family(r.signature_summary) for r in hung} == {"G2"}
    assert "| raw | 3/10 | G2: all three hangs" in table

    # The throughput figures are the matrices' tables (regenerated from the stores by test_report).
    def tokens(store: str, cell: str) -> int:
        line = next(
            ln for ln in (RESULTS / store / "SUMMARY.md").read_text().splitlines() if ln.startswith(f"| {cell} |")
        )
        return int([c.strip() for c in line.strip("|").split("|")][-3])

    tb = tokens("gpu-batching", f"launch-bound-tb:{LOCK}@dflash-stages")
    bucketed = tokens("gpu-exposure", f"launch-bound:{LOCK}@dflash-stages")
    assert f"ran {tb:,} tokens/s median here against {bucketed:,} with bucketed batches" in TEXT


def test_the_r24_claim_is_what_its_stores_hold():
    # 2.13 from the catalogue store, 2.14.1 and 2.15.0 from the versions stores: raw failures as R4,
    # the lock clean, and R4's window openings summed over the raw trials.
    stores = {"2.13": "catalogue-cpu", "2.14.1": "versions-cpu-torch2.14.1", "2.15.0": "versions-cpu-torch2.15.0"}
    seen = {}
    for version, store in stores.items():
        raw = [r for r in records(store) if r.cell == "r24:raw@fx-widen"]
        fixed = [r for r in records(store) if r.cell == "r24:global-lock@fx-widen"]
        k = sum("fx-module-not-submodule" in (r.signature or "") for r in raw)
        assert len(raw) == len(fixed) == 10 and not any(r.outcome.is_failure for r in fixed)
        seen[version] = (k, sum((r.exposures or {}).get("R4", 0) for r in raw))
    assert seen["2.13"][0] == 6 and seen["2.14.1"][0] == seen["2.15.0"][0] == 10
    assert "6/10 under fx-widen on 2.13, 10/10 on 2.14.1 and on 2.15.0, `global-lock` 0/10 on each" in TEXT
    assert (
        f"The R4 window opened {seen['2.13'][1]} times in 10 trials on 2.13 and {seen['2.14.1'][1]:,} "
        f"and {seen['2.15.0'][1]:,} times on 2.14.1 and 2.15.0"
    ) in TEXT


def test_the_batching_line_is_what_cpu_batching_holds():
    for suffix in ("", "-tb"):
        assert cell_kn("cpu-batching", f"tiny{suffix}:raw@dflash-stages") == (0, 6)
        assert cell_kn("cpu-batching", f"tiny{suffix}:global-lock@dflash-stages") == (0, 6)
        assert cell_kn("cpu-batching", f"tiny-ro{suffix}:raw@-") == (6, 6)
        assert cell_kn("cpu-batching", f"tiny-ro{suffix}:target-hook-taps@-") == (0, 6)
    assert "stays 0/6 raw and 0/6 under `global-lock`, and with a compiled target fails 6/6 raw by r19 and 0/6" in TEXT


def test_the_r26_claim_is_what_its_stores_hold():
    # Widened raw and await-thread-exit per torch; the bare cells (60 exits a trial) on 2.13.
    stores = {
        "2.13.0": ("catalogue-cpu", 29),
        "2.14.1": ("versions-cpu-torch2.14.1", 10),
        "2.15.0": ("versions-cpu-torch2.15.0", 10),
    }
    for version, (store, n_fix) in stores.items():
        raw = [r for r in records(store) if r.cell == "r26:raw@-"]
        fixed = [r for r in records(store) if r.cell == "r26:await-thread-exit@-"]
        assert (
            sum("terminate called without an active exception" in (r.signature_summary or "") for r in raw)
            == len(raw)
            == 10
        ), version
        assert len(fixed) == n_fix and not any(r.outcome.is_failure for r in fixed), version
        assert {r.torch_version.split("+")[0] for r in raw + fixed} == {version}
    bare = [r for r in records("catalogue-cpu") if r.cell.startswith("r26-bare:raw@")]
    assert len(bare) == 20 and not any(r.outcome.is_failure for r in bare)
    spec = json.loads((ROOT / "harness" / "campaign" / "specs" / "catalogue-cpu.json").read_text())
    argv = spec["workloads"]["r26-bare"]["argv"]
    assert len(bare) * int(argv[argv.index("--rounds") + 1]) == 1200
    assert "holds: 0/29 on 2.13.0, 0/10 on 2.14.1 and 2.15.0, against 10/10 raw on each" in TEXT
    assert "bare through the runner 0/20 trials (1,200 exits)" in TEXT


def test_the_corpus_counts_are_its_tables():
    def as_expected(name: str) -> tuple[int, int, dict]:
        found = json.loads((RESULTS / "corpus" / name).read_text())
        progs = [p for p in found["programs"] if not p.get("skipped")]
        return sum(p["verdict"] == "as expected" for p in progs), len(progs), found

    k, n, cpu = as_expected("cpu-torch2.13.0-2026-12-04.json")
    assert (k, n) == (46, 47) and cpu["torch"] == "2.13.0+cpu" and "2026-12-04" in cpu["host"]
    assert f"races for {k} of {n} CPU programs nobody here wrote (torch 2.13.0+cpu, 2026-12-04)" in TEXT
    assert f"named right in {k} of {n} (CPU)" in TEXT
    (differs,) = [p for p in cpu["programs"] if p["verdict"] != "as expected"]
    assert differs["name"] == "hf_llama_serving_fx_tracer" and "R4" in differs["races"]
    assert set(differs["found_races"]) == {"F2", "unknown"} and "`hf_llama_serving_fx_tracer`, showed F2" in TEXT
    k, n, gpu = as_expected("cuda-torch2.11.0.json")
    assert (k, n) == (7, 7) and "2026-12-02" in gpu["host"]
    assert f"and {k} of {n} GPU programs (one H200, torch 2.11, 2026-12-02)" in TEXT
    fixes = json.loads((RESULTS / "corpus" / "cpu-fixes-torch2.13.0-2026-12-04.json").read_text())["fixes"]
    held = sum(f["as_expected"] for f in fixes)
    assert f"each CPU entry's fix did what its entry says in {held} of {len(fixes)}" in TEXT


def _newest_gate() -> Path:
    """The newest gate record: names are the date, the host and a letter for a second call."""
    return max((RESULTS / "gpu-gate").glob("20*.json"), key=lambda path: path.stem)


def test_the_gpu_gate_is_its_record():
    newest = _newest_gate()
    gate = json.loads(newest.read_text())
    assert gate["failed"] == 0 and gate["green"] and f"torch 2.11.0+cu130, {gate['date']}, one call" in TEXT
    assert f"[record](../../results/gpu-gate/{newest.name})" in TEXT
    shapes = gate["gpu_shapes"]
    assert f"{shapes['right']} read right, {shapes['unconfirmed']} not judged" in TEXT and not shapes["wrong"]
    log = (newest.with_suffix("") / "log.txt").read_text()
    assert "NVIDIA H100" in log and "torch 2.11.0+cu130" in log and "a fresh H100, torch 2.11.0+cu130" in TEXT
    assert f"the GPU race suite passes {gate['passed']} of {gate['passed'] + gate['failed']}" in TEXT
    programs = gate["programs"]
    expected = sum(p["as_expected"] for p in programs)
    assert expected == len(programs) and f"{expected} of {len(programs)} GPU programs come out as expected" in TEXT
    pt = next(p for p in programs if p["name"].startswith("pt123177"))
    assert f"32 threads fail raw {pt['raw']} and {pt['fixed']} under `{pt['fix']}`" in TEXT
    failing = [p for p in programs if not p["raw"].startswith("0/")]
    held = [p for p in failing if p["fixed"].startswith("0/")]
    assert f"held on {len(held)} of the {len(failing)} GPU programs that fail raw" in TEXT
    by = {p["name"]: p for p in programs}
    assert f"autotuned in a pool ({by['gpu_max_autotune_threadpool']['fixed']})" in TEXT
    assert f"eager work beside a capture ({by['gpu_capture_while_other_thread_works']['fixed']})" in TEXT
    # The gate before was red for one program only, whose entry said clean; it failed as F2, and
    # its entry now expects a rare F2
    before = json.loads((RESULTS / "gpu-gate" / "2026-12-06-h100.json").read_text())
    (odd,) = [p for p in before["programs"] if not p["as_expected"]]
    assert not before["green"] and odd["name"] == "gpu_default_mode_threads"
    assert f"failed {odd['raw'].replace('/', ' of ')} raw runs with F2 on the gate before" in TEXT
    diagnosis = (RESULTS / "gpu-gate" / "2026-12-06-h100" / "diagnosis-gpu_default_mode_threads.txt").read_text()
    assert "1 of 1 failing runs matched a catalogued race; F2 in 1 run" in diagnosis
    entry = next(p for p in foreign.load() if p.name == odd["name"])
    assert entry.rare and entry.races == ("F2",)
    arms = [
        (f["raw_failed"], f["raw_runs"])
        for path in RESULTS.glob("gpu-gate/*/*.json")
        for f in json.loads(path.read_text()).get("fixes", [])
        if f["name"] == odd["name"]
    ]
    alone = [
        json.loads(path.read_text())["programs"][0]
        for path in (RESULTS / "h100-2026-12-06-default-mode-threads").glob("*.json")
    ]
    assert len(alone) == 2 and all(set(p["outcomes"]) == {"OK"} for p in alone)
    failed = sum(a for a, _ in arms)
    runs = sum(n for _, n in arms) + sum(p["outcomes"]["OK"] for p in alone)
    assert f"{failed} of {runs} raw runs in all" in TEXT
    # The second run: the F1 set with cublas-handle-init (acting) and stash-incref on the shared-graph shapes
    second = RESULTS / "gpu-gate" / "2026-12-05-second-run"
    four = {
        f["name"]: a["failed"]
        for path in second.glob("also-*.json")
        for f in json.loads(path.read_text())["fixes"]
        for a in f["also"]
    }
    shapes = (
        "gpu_max_autotune_threadpool",
        "gpu_reduce_overhead_shared_threads",
        "gpu_stream_per_worker_reduce_overhead",
    )
    assert f"only F1c's overwritten outputs stay ({', '.join(f'{four[n]}/4' for n in shapes)} on the H200," in TEXT
    rows = [f for path in second.glob("gate-corpus-*.json") for f in json.loads(path.read_text())["fixes"]]
    (pt,) = [f for f in rows if f["name"].startswith("pt123177")]
    assert pt["fixed_failed"] == 1 and "pytorch#123177's program 1 of 4 under the F1 set" in TEXT


def _timeline_phases(line: str) -> dict[str, float]:
    """A trainer `timeline:` line's phases, seconds by name."""
    return {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)s", line)}


def _startup_lines(summary: str) -> dict[str, str]:
    """A fresh-start summary's closing `startup LABEL rc=0 ...` lines, by label."""
    text = (RESULTS / summary).read_text()
    return dict(re.findall(r"^startup (\w+) rc=0 (.*)$", text, flags=re.M))


NATIVE = "h200-2026-12-05-native-start/summary.txt"
EAGER_OPT = "h100-2026-12-05-eager-optimizer"
NOW = "h100-2026-12-05-start-without-pandas"


BYTECODE = "h100-2026-12-06-bytecode-cache"
FAST = "h100-2026-12-06-fast-start"
FIRST_USE = "h100-2026-12-06-first-use"
FRESH = "h100-2026-12-06-fresh-hosts"
CUDA_START = "h100-2026-12-05-cuda-start"


def _ab_file(store: str) -> dict[str, str]:
    """A tools/start_ab.sh output's `LABEL rc=0 wall ...` lines (`store` under results/), by label."""
    text = (RESULTS / store).read_text()
    return dict(re.findall(r"^([\w-]+) rc=0 (wall .*)$", text, flags=re.M))


def _ab_runs(host: str) -> dict[str, str]:
    """One host's start_ab runs in the CUDA-start record."""
    return _ab_file(f"{CUDA_START}/{host}/start-ab.txt")


def _start_line(store: str, label: str) -> str:
    if store.endswith("start-ab.txt"):
        return _ab_file(store)[label]
    if store.startswith(CUDA_START):
        return _ab_runs(store.split("/")[1])[label]
    return _startup_lines(store)[label]


@pytest.mark.parametrize(
    "store, label, row",
    [
        (f"{FAST}/final/start-ab.txt", "host-fresh", "fresh H100, FlashAttention, context beside the import"),
        (f"{FRESH}/host-d/start-ab.txt", "host-fresh", "the slowest of four fresh H100s, as committed"),
        (f"{FRESH}/host-d/start-ab.txt", "warm-new-1", "that H100, warm"),
        (f"{FAST}/slow-host/start-ab.txt", "host-fresh", "a slow fresh H100, context beside the import"),
        ("h200-2026-12-05-startup/summary.txt", "fresh", "fresh H200, before"),
    ],
)
def test_the_fresh_host_start_is_its_record(store, label, row):
    line = _start_line(store, label)
    phase = _timeline_phases(line.split("timeline:")[1])
    at = _first_step_at(line)
    share, total = _outside(line)
    assert (
        f"| {row} | {phase['imports']:.1f} s | {at:.1f} s | {phase['target_load']:.1f} s | {phase['corpus']:.1f} s | "
        f"{phase['evaluation']:.1f} s | {share}% of {total} s |"
    ) in TEXT


def test_the_bytecode_cache_is_its_record():
    every = _ab_file(f"{BYTECODE}/start-ab.txt")
    runs = {k: every[k] for k in ("host-fresh", "cold-new-1", "warm-new-1", "cold-old-1", "warm-old-1")}
    imports = {k: _timeline_phases(v.split("timeline:")[1])["imports"] for k, v in runs.items()}
    share = {k: _outside(v)[0] for k, v in runs.items()}
    assert (
        f"the first run's imports took {imports['host-fresh']:.1f} s, and later runs' {imports['cold-new-1']:.1f} s with the page"
        f" cache dropped ({share['cold-new-1']}%) and {imports['warm-new-1']:.1f} s warm ({share['warm-new-1']}%), against"
        f" {imports['cold-old-1']:.1f} s ({share['cold-old-1']}%) and {imports['warm-old-1']:.1f} s ({share['warm-old-1']}%)"
    ) in TEXT
    with tarfile.open(RESULTS / BYTECODE / "start-ab.tgz") as tar:
        first = tar.extractfile("start-ab/host-fresh.err").readline().decode()
        later = tar.extractfile("start-ab/warm-new-1.err").readline().decode()
    assert first.startswith("bytecode: torch has none here") and not later.startswith("bytecode:")


def _first_use_runs() -> dict[str, str]:
    """The first-use record's `LABEL 28.3s timeline: ...` lines, by label."""
    text = (RESULTS / FIRST_USE / "fresh-host" / "first-use.txt").read_text()
    return dict(re.findall(r"^([\w-]+) [\d.]+s (timeline: .*)$", text, flags=re.M))


def _first_calls(name: str) -> list[float]:
    """Every first call of one operation in the first-use probes, in milliseconds."""
    text = "".join((RESULTS / FIRST_USE / d / "first-use-jit.txt").read_text() for d in ("ops-a", "ops-b"))
    return [float(x) for x in re.findall(rf"^{re.escape(name)} +first +([\d.]+) ms", text, flags=re.M)]


def test_the_first_use_and_the_fast_start_are_their_records():
    final, slow = _ab_file(f"{FAST}/final/start-ab.txt"), _ab_file(f"{FAST}/slow-host/start-ab.txt")
    fresh = final["host-fresh"]
    at = _first_step_at(fresh)
    assert f"a fresh H100's first run spent {_outside(fresh)[0]}%, its first step at {at:.1f} s" in TEXT
    others = [
        _start_line(f"{BYTECODE}/start-ab.txt", "host-fresh"),
        slow["host-fresh"],
        _first_use_runs()["host-fresh"],
    ]
    imports = sorted(_timeline_phases(x.split("timeline:")[1])["imports"] for x in others)
    fast = _timeline_phases(fresh.split("timeline:")[1])["imports"]
    assert f"its imports took {fast:.1f} s there and {imports[0]:.1f}-{imports[-1]:.1f} s on three other" in TEXT
    cudnn = _first_calls("sdpa causal bf16") + _first_calls("sdpa causal bf16 any")
    flash = set(_first_calls("sdpa causal bf16 flash"))
    cached = min(cudnn)
    uncached = [x for x in cudnn if x > 4 * cached]
    assert len(cudnn) == 6 and len(uncached) == 5 and flash == {3.4}
    assert (
        f"took {min(uncached) / 1000:.2f}-{max(uncached) / 1000:.2f} s through cuDNN's attention, {cached:.0f} ms once"
        f" that cache held them, and {flash.pop()} ms through FlashAttention" in TEXT
    )
    host = (RESULTS / FIRST_USE / "fresh-host" / "host.txt").read_text()
    assert "cannot access '/root/.nv'" in host and re.search(r"^680K\s", host, flags=re.M) and "680K after" in TEXT
    runs = _first_use_runs()
    off = {_outside(runs[f"cold-jitcache-off-{k}"])[0] for k in (1, 2)}
    on = {_outside(runs[f"cold-{k}"])[0] for k in (1, 2)}
    assert len(off) == len(on) == 1 and f"a cold run spent {off.pop()}% against {on.pop()}%" in TEXT
    tau = {re.search(r'"tau": ([\d.]+)', v).group(1) for k, v in final.items() if "new" in k or k == "host-fresh"}
    base_tau = {re.search(r'"tau": ([\d.]+)', v).group(1) for k, v in final.items() if "base" in k}
    assert len(tau) == len(base_tau) == 1
    assert f"tau {float(tau.pop()):.4f} against {float(base_tau.pop()):.4f} on the same shipped corpus" in TEXT
    _fast_start_imports_and_context(slow)


def _fast_start_imports_and_context(slow: dict[str, str]) -> None:
    phase = {k: _timeline_phases(v.split("timeline:")[1]) for k, v in slow.items() if k.startswith("cold-")}
    new = [phase[f"cold-new-{k}"]["device_init"] for k in (1, 2)]
    old = [phase[f"cold-{t}-{k}"]["device_init"] for t in ("base", "order") for k in (1, 2)]
    assert set(new) == {0.0} and f"device_init 0.0 s in two cold runs against {min(old):.1f}-{max(old):.1f} s" in TEXT
    order = [phase[f"cold-order-{k}"]["imports"] for k in (1, 2)]
    base = [phase[f"cold-base-{k}"]["imports"] for k in (1, 2)]
    assert f"imports {order[0]:.1f} s and {order[1]:.1f} s against {base[0]:.1f} s and {base[1]:.1f} s" in TEXT
    with gzip.open(RESULTS / FAST / "slow-host" / "prof-first.txt.gz", "rt") as f:
        stacks = [line.rsplit(" ", 1) for line in f]
    main = [(stack, int(n)) for stack, n in stacks if "MainThread" in stack and "_find_and_load" in stack]
    imports, compiling = sum(n for _, n in main) / 100, sum(n for s, n in main if "source_to_code" in s) / 100
    assert f"has {imports:.1f} s of the main thread's samples in imports, {compiling:.1f} s of them compiling" in TEXT


def _first_step_at(line: str) -> float:
    """When a run's first step came, from its closing timeline (seconds)."""
    return float(re.search(r"first step at ([\d.]+)s", line).group(1))


def _outside(line: str) -> tuple[int, int]:
    share, total = re.search(r"(\d+)% of (\d+)s outside training", line).groups()
    return int(share), int(total)


def _runs(path: str) -> dict[str, str]:
    """`LABEL rc=0: timeline: ...` lines of a store (cached repeats, cold starts), by label."""
    text = (RESULTS / path).read_text()
    return dict(re.findall(r"^([\w-]+) rc=0: (timeline: .*)$", text, flags=re.M))


def _span(values) -> str:
    return f"{min(values)}-{max(values)}"


def test_what_is_left_of_the_start_is_its_record():
    h100, h200 = RESULTS / "h100-2026-12-05-startup", RESULTS / "h200-2026-12-05-native-start"

    def timeline(path):
        return _timeline_phases(next(x for x in path.read_text().splitlines() if x.startswith("timeline:")))

    before, after = timeline(h100 / "train.err"), timeline(h100 / "fresh-start" / "fresh.err")
    assert f"({before['evaluation']:.1f} s to {after['evaluation']:.1f} s on an H100" in TEXT
    steps = [
        float(m)
        for path in (h100 / "steps.txt", h100 / "profile-run" / "steps.txt", h200 / "steps.txt")
        for m in re.findall(
            r"^(?:from transformers import|import transformers).*?([\d.]+)s ", path.read_text(), flags=re.M
        )
    ]
    assert len(steps) == 5 and f"{min(steps):.1f}-{max(steps):.1f} s on these hosts" in TEXT
    probe = (h100 / "eval-shapes.txt").read_text()
    first = {
        m: [float(x) for x in re.findall(rf"^{m} pass 1: ([\d.]+)s", probe, flags=re.M)] for m in ("base", "pad32")
    }
    assert len(first["base"]) == 2 and min(first["base"]) > 3 * max(first["pad32"])


def _shares(lines) -> list[int]:
    return [_outside(x)[0] for x in lines]


COLD = "h100-2026-12-05-cold-start/cold-start.txt"


def test_the_start_without_torch_dynamo_is_its_record():
    before = sorted(
        _timeline_phases(v)["pipeline_build"]
        for v in _startup_lines("h100-2026-12-05-native-start/summary.txt").values()
    )
    assert before[0] == 0.0 and f"where it took {before[1]:.1f}-{before[2]:.1f} s" in TEXT
    now = [
        *_startup_lines(f"{EAGER_OPT}/summary.txt").values(),
        *_runs(f"{EAGER_OPT}/cached-repeats.txt").values(),
        *_runs(COLD).values(),
        *_startup_lines(f"{NOW}/summary.txt").values(),
        *_runs(f"{NOW}/cached-repeats.txt").values(),
    ]
    assert len(now) == 16 and {_timeline_phases(x)["pipeline_build"] for x in now} == {0.0}
    assert "the pipeline's build 0.0 s" in TEXT
    evaluation = [_timeline_phases(x)["evaluation"] for x in now]
    assert f"keeps every row in its batch to the end ({min(evaluation):.1f}-{max(evaluation):.1f} s)" in TEXT
    steps = (RESULTS / EAGER_OPT / "steps.txt").read_text()
    dynamo = [float(x) for x in re.findall(r"^import torch._dynamo +([\d.]+)s", steps, flags=re.M)]
    ours = [float(x) for x in re.findall(r"^the trainer's optimizer, one step +([\d.]+)s", steps, flags=re.M)]
    assert len(dynamo) == 2 and dynamo[1] < 0.05 and max(ours) < 0.1  # native first, transformers' second
    assert f"whose first call imported torch._dynamo ({dynamo[0]:.1f} s in a fresh process" in TEXT


def test_the_kernel_read_ahead_is_its_record():
    runs: dict[str, list[tuple[float, float]]] = {}
    for name in ("preload-ab-1.txt", "preload-ab-2.txt"):
        text = (RESULTS / "h100-2026-12-06-preload" / name).read_text()
        for variant, imported, gemm in re.findall(
            r"^round \d+ (\S+) +cold: import ([\d.]+) s, first GEMM at ([\d.]+) s", text, flags=re.M
        ):
            runs.setdefault(variant, []).append((float(imported), float(gemm)))
    none, libs = runs["none"], runs["libs"]

    def medians(rs):
        return tuple(f"{statistics.median(r[i] for r in rs):.1f}" for i in (0, 1))

    assert len(none) == len(libs) == 6
    (li, lg), (ni, ng) = medians(libs), medians(none)
    assert f"a first GEMM in a median {li} s and {lg} s against {ni} s and {ng} s, 6 cold runs each" in TEXT


def test_reading_ahead_before_the_import_is_its_record():
    cold = _runs(COLD)
    plain = [v for k, v in cold.items() if k.startswith("cold-plain")]
    ahead = [v for k, v in cold.items() if k.startswith("cold-readahead")]
    assert len(plain) == len(ahead) == 2 and max(_shares(plain)) < min(_shares(ahead))
    assert f"made it worse ({_span(_shares(ahead))}%" in TEXT


def test_the_diagnosis_count_is_what_diagnose_names_in_the_committed_stores():
    from harness.diagnosis import diagnose
    from tests.test_diagnose import _stored_failures

    stored = _stored_failures()
    findings = diagnose.diagnose([f for _, _, f in stored])
    by_source = {s: f for f in findings for s in f.sources}
    named = sum(by_source[f.run_id].race is not None for _, _, f in stored)
    assert (
        f"names the catalogued race behind {named:,} of the {len(stored):,} failing trials in the committed stores"
        in TEXT
    ), "REPORT.md's diagnosis counts are stale"


def test_the_section_counts_repeat_their_stores():
    # gpu-default stressed, the CPU trainer with a compiled target, the corrections' counts.
    phase = totals("gpu-phase")["default"]["phase-lock+target-hook-taps"]
    raw = totals("gpu-phase")["default"]["raw"]
    assert (
        f"`phase-lock,target-hook-taps` {phase.k}/{phase.n} ({phase.n_stressed} stressed), raw {raw.k}/{raw.n} (a G2 hang)"
        in TEXT
    )
    eager = totals("gpu-exposure")["default"]["eager"]
    assert f"Eager: {eager.k}/{eager.n} ({eager.n_stressed} stressed, results/gpu-exposure)" in TEXT
    taps = totals("cpu-target-taps")["tiny-ro"]
    assert (
        f"raw {taps['raw'].k}/{taps['raw'].n} on `tiny-ro`; `target-hook-taps` {taps['target-hook-taps'].k}/"
        f"{taps['target-hook-taps'].n} and `phase-lock` {kn('cpu-target-taps', 'tiny-ro', 'phase-lock')} hold"
    ) in TEXT
    locked = [r for r in records("cpu-target-taps") if r.cell.startswith("tiny-ro:phase-lock@")]
    unlocked = [r for r in records("cpu-target-taps") if r.cell.startswith("tiny-ro:raw@") and r.exposures]
    assert len(locked) == 39 and not any(r.exposures["F10"] or r.exposures["G2"] for r in locked)
    opened = sum(bool(r.exposures["F10"] or r.exposures["G2"]) for r in unlocked)
    assert opened == len(unlocked) and f"opened in none against {opened} of {len(unlocked)} raw" in TEXT
    # What we got wrong: r04 under graph-isolation, r23 raw, launch-bound without CUDA graphs.
    r04 = [cell_kn("gpu-repros", f"r04:graph-isolation@{p}") for p in ("-", "compile-chaos")]
    r23 = [cell_kn("gpu-repros", f"r23:raw@{p}") for p in ("-", "compile-chaos")]
    assert tuple(map(sum, zip(*r04, strict=True))) == (20, 20) and "(r04 20/20)" in TEXT
    k, n = map(sum, zip(*r23, strict=True))
    assert f"(r23 {k}/{n})" in TEXT
    assert (
        f"G2 in {kn('gpu-campaign', 'launch-bound', 'no-cudagraphs', False).replace('/', ' of ')} launch-bound" in TEXT
    )


def test_the_2_11_column_ran_where_it_says():
    # The first 2-3 trials of some cells on the H200 host (2026-12-02, its Python 3.12), the rest and
    # every fake-guard-exit trial on the 2-core machine (2026-12-03).
    by_cell: dict[str, int] = {}
    for r in records("versions-cpu-torch2.11.0"):
        if str(r.started_at).startswith("2026-12-02"):
            by_cell[r.cell] = by_cell.get(r.cell, 0) + 1
            assert r.python.startswith("3.12"), r.python
    assert set(by_cell.values()) == {2, 3} and len(by_cell) == 21
    assert f"the first 2-3 trials of {len(by_cell)} cells (the H200 host's CPUs, 2026-12-02)" in TEXT
    family = load().family
    crashed = [r for r in records("versions-cpu-torch2.11.0") if r.outcome.is_failure]
    assert all(
        str(r.started_at).startswith("2026-12-03") for r in crashed if family(r.signature_summary) == "fake-guard-exit"
    )


def test_the_eager_first_step_on_a_fresh_host_is_its_record():
    folder = RESULTS / "h200-2026-12-04-eager-r25"

    def final(name: str) -> dict:
        lines = [json.loads(line) for line in (folder / name).read_text().splitlines() if line.startswith("{")]
        return next(r for r in reversed(lines) if r.get("event") == "final")["phases"]

    fresh, cached = final("fresh-host.jsonl"), final("corpus-cached.jsonl")
    assert (
        f"eager's first step at {fresh['first_step_at']:.1f} s ({fresh['corpus']:.1f} s of corpus), "
        f"{cached['first_step_at']:.1f} s with it cached"
    ) in TEXT


def test_the_commands_the_report_names_still_parse():
    """Refactors rename modules, not commands: every `python -m harness ...` REPORT shows names a
    command, and one written out in full still parses."""
    import shlex

    from harness.cli import COMMANDS
    from harness.cli import build_parser as harness_parser

    commands = re.findall(r"`python3? -m harness ([^`]+)`", TEXT)
    assert len(commands) >= 10
    for line in commands:
        argv = shlex.split(line)
        assert argv[0] in COMMANDS, line
        if len(argv) > 1 and not any(w == "..." or "[" in w or w.isupper() for w in argv):
            harness_parser().parse_args(argv)


def _hunt(name: str) -> tuple[list[dict], list[dict]]:
    """A committed hunt's tests (its --json report) and its runs (hunt.jsonl)."""
    folder = RESULTS / "hunt" / name
    tests = json.loads((folder / "report.json").read_text(encoding="utf-8"))["tests"]
    lines = [json.loads(line) for line in (folder / "hunt.jsonl").read_text(encoding="utf-8").splitlines()]
    return tests, [x for x in lines if "run" in x and x["run"] >= 0]


def _racing(tests: list[dict], race: str | None = None, where: str = "") -> int:
    picked = [t for t in tests if t["verdict"] == "race" and where in t["id"]]
    return len(picked) if race is None else sum(race in t["races"] for t in picked)


def _bench_ratios(name: str) -> tuple[list[float], float]:
    """A `tools.bench_hunt` record's ratios per round and its median."""
    text = (RESULTS / "hunt" / name).read_text(encoding="utf-8")
    rounds = [float(x) for x in re.findall(r"ratio hunt / one direct run: ([\d.]+)", text)]
    (median,) = (float(x) for x in re.findall(r"median ratio over \d+ round\(s\): ([\d.]+)", text))
    assert median == pytest.approx(statistics.median(rounds), abs=0.01)  # the median of unrounded ratios
    return rounds, median


def _the_hunt_costs_what_its_benches_measured() -> None:
    rounds, median = _bench_ratios("2026-12-07-bench-hunt-einops-0.8.2.txt")
    assert f"costs {median:.2f}x one direct" in TEXT and f"({rounds[0]:.2f}x and {rounds[1]:.2f}x in two rounds" in TEXT
    _, own = _bench_ratios("2026-12-07-bench-hunt-own-suite.txt")
    assert f"and {own:.2f}x on the project's 3-test hunt suite" in TEXT


def test_the_hunt_section_is_what_the_hunts_recorded():
    td, td_runs = _hunt("2026-12-04-tensordict-0.14.0-alone")
    first, first_runs = _hunt("2026-12-04-tensordict-0.14.0")
    own, own_runs = _hunt("2026-12-04-own-tests-alone")
    after = [t for t in td if t["verdict"] == "after another test"]
    assert all(t["one_thread"] == t["alone"] == "passed" and not t["races"] for t in after)
    assert f"{_racing(td)} of {len(td)} tests race and {len(after)} fail only after another test" in TEXT
    assert f"Named: R8 {_racing(td, 'R8')}, an eager tensorclass" in TEXT
    assert f"`export-threads` {_racing(td, 'export-threads')}; a first hunt also R5 {_racing(first, 'R5')}." in TEXT
    assert _racing(td, "R5") == 0
    aftermath = (RESULTS / "hunt" / "2026-12-04-tensordict-0.14.0" / "nested-region-after-export.txt").read_text()
    assert aftermath.count("1 passed, 239 deselected") == 3 and aftermath.count("6 errors") == 2
    named = [t for t in own if t["verdict"] == "race" and t["races"]]
    count = {race: _racing(own, race) for race in ("F2", "R4", "R5")}
    assert (
        f"{_racing(own)} of {len(own)} race, {len(named)} naming F2 ({count['F2']}), R4 ({count['R4']}) or R5 ({count['R5']}),"
        in TEXT
    )
    (ast,) = [t for t in own if t["verdict"] == "after another test"]
    assert "AST constructor recursion depth mismatch" in ast["message"] and ast["alone"] == "passed"
    assert (
        f"{_racing(own) - len(named)} on the tests' shared state; 1 fails after another test, CPython's `ast`" in TEXT
    )
    runs = td_runs + first_runs + own_runs
    assert (
        f"a test that kills its process ends the run ({sum(r['parts'] > 1 for r in runs)} of these {len(runs)})" in TEXT
    )
    assert all(t["message"].startswith("ABORT: ") for r in runs for t in r["tests"] if t["outcome"] == "crashed")
    _the_hunt_costs_what_its_benches_measured()
    corpus = json.loads((RESULTS / "corpus" / "cpu-torch2.13.0-2026-12-04-export-threads.json").read_text())
    (program,) = corpus["programs"]
    assert program["found_races"] == ["F3"] and "diagnose names only F3 there" in TEXT
    fixes, _ = _hunt("2026-12-04-tensordict-0.14.0-fixes")
    tc = [t for t in fixes if "TestTC" in t["id"] and t["verdict"] == "race"]
    none, lock = (sum(t["arms"][k]["failed"] for t in tc) for k in (0, 1))
    runs = {sum(t["arms"][k]["runs"] for t in tc) for k in (0, 1)}
    assert [t["arms"][1]["fixes"] for t in tc] == [["global-lock"]] * len(tc) and runs == {12}
    assert f"`global-lock` failed there {lock} of 12 against {none} of 12, now an edit" in TEXT
    assert {f.name: f for f in load().race("R8").fixes}["global-lock"].edit
    entry = (
        (ROOT / "tests" / "foreign" / "corpus.toml")
        .read_text(encoding="utf-8")
        .split('name = "export_in_worker_threads"')[1]
    )
    direct = (RESULTS / "corpus" / "2026-12-04-export-in-worker-threads-direct.txt").read_text(encoding="utf-8")
    assert direct.count("exported 0 of 24 models with 4 workers") == 3 and "exit 1" in direct
    assert (
        "exported 24 of 24 models with 1 workers" in direct
        and "2026-12-04-export-in-worker-threads-direct.txt" in entry
    )
    assert "all 24 exports failed (3 runs), 24 of 24 alone" in TEXT


def _after_imports(line: str) -> float:
    """Seconds outside training after the imports: every phase of a timeline but those two."""
    phases = _timeline_phases(line.split("timeline:")[1].split(";")[0])
    return round(sum(v for k, v in phases.items() if k not in ("imports", "training")), 1)


def _arm(runs: dict[str, str], prefix: str) -> list[float]:
    return [_after_imports(v) for k, v in runs.items() if k.startswith(prefix)]


def test_the_first_use_thread_and_the_verify_graphs_are_their_records():
    handful, final = _ab_runs("handful"), _ab_runs("final")
    with_it = _arm(handful, "cold-slim") + _arm(final, "cold-new")
    without = _arm(handful, "cold-new") + _arm(final, "cold-graphs")
    assert len(with_it) == len(without) == 4
    assert f"{_span(with_it)} s outside training after the imports against {_span(without)} s without it" in TEXT
    ev = {
        arm: [_timeline_phases(v)["evaluation"] for k, v in handful.items() if re.match(rf"(cold|warm)-{arm}-", k)]
        for arm in ("new", "base")
    }
    assert len(ev["new"]) == len(ev["base"]) == 4
    assert f"CUDA graphs ({_span(ev['new'])} s against {_span(ev['base'])} s, the same tau)" in TEXT
    taus = re.findall(
        r'"tau": ([\d.]+)',
        "".join((RESULTS / CUDA_START / h / "start-ab.txt").read_text() for h in ("one-layer", "handful", "final")),
    )
    assert len(taus) == 35 and len(set(taus)) == 1


def test_the_bytecode_finding_is_its_record():
    out = (RESULTS / "h100-2026-12-05-bytecode" / "output.txt").read_text()
    plain = [float(x) for x in re.findall(r"^plain \d: ([\d.]+) s", out, flags=re.M)]
    cached = [float(x) for x in re.findall(r"^bytecode cached \d: ([\d.]+) s", out, flags=re.M)]
    assert len(plain) == 5 and len(cached) == 3
    warm_plain = plain[1:]  # the host's first process read torch from a cold disk
    assert f"`import torch` {min(warm_plain):.1f}-{max(warm_plain):.1f} s" in TEXT
    assert f"against {min(cached[1:]):.1f}-{max(cached[1:]):.1f} s with its bytecode cached" in TEXT
    assert "pyc in torch/: 0," in out and "'PYTHONDONTWRITEBYTECODE': '1'" in out


def test_the_committed_tree_on_four_fresh_hosts_is_its_record():
    hosts = [_ab_file(f"{FRESH}/host-{h}/start-ab.txt") for h in "abcd"]
    first = [h["host-fresh"] for h in hosts]
    at = [_first_step_at(x) for x in first]
    cold = [_outside(h[k])[0] for h in hosts for k in h if k.startswith("cold-new")]
    base = [_outside(h[k])[0] for h in hosts for k in h if k.startswith("cold-base")]
    assert len(cold) == len(base) == 4 and max(at) < 30
    assert (
        f"four fresh H100s' first runs spent {_span([_outside(x)[0] for x in first])}%, their first steps"
        f" at {min(at):.1f}-{max(at):.1f} s, and their cold runs {_span(cold)}% against {_span(base)}% with"
        " cuDNN's attention" in TEXT
    )
    worst = max(first, key=lambda x: _outside(x)[0])
    assert worst == hosts[3]["host-fresh"]  # the table's row for the slowest of the four


def test_the_generated_programs_are_their_report():
    report = (RESULTS / "shapes" / "2026-12-07-b.md").read_text()
    right, confirmed = re.search(r"^- overall right: (\d+)/(\d+)$", report, re.M).groups()
    assert f"{right} of the {confirmed} whose fault fired read right" in TEXT
    values = re.findall(r"^\| \w+ \| [\w-]+ \| (\d+)/(\d+) \|$", report, re.M)
    assert len(values) == 24 and all(a == b for a, b in values) and "every value of every part at 100%" in TEXT


# --- the user's situation ---------------------------------------------------------------------


def test_the_situation_rows_are_the_catalogues_counts():
    """Each `RACE (k/n)` is the race's repro count on the row's torch, each "RACE: `fix` k/n" (or
    the row's first race's) the fix's measured count, each price the answer table's."""
    from harness.diagnosis.catalogue import RecordSource, count
    from harness.diagnosis.fix_advice import fix_lines

    catalogue, records_of = load(), RecordSource()
    rows = [line for line in table_after(SITUATION).splitlines() if line.startswith("| torch")]
    assert len(rows) >= 10 and any("| not measured |" in r for r in rows if r.startswith("| torch 2.12 or later, GPU"))
    checked = 0
    for r in rows:
        torch = re.match(r"\| torch (\d+\.\d+)", r).group(1)
        seen = re.findall(r"\b([A-Za-z0-9-]+) \((\d+)/(\d+)", r.split(" | ")[1])
        for rid, k, n in seen:
            race = catalogue.race(rid)
            c = count(next(v for v in race.versions if v.torch == torch), race, records_of)
            assert (c.k, c.n) == (int(k), int(n)), (r[:40], rid, c)
            checked += 1
        for part in r.split(" | ")[2].split("; "):
            for rid, fix, k, n in re.findall(r"(?:([A-Za-z0-9-]+): )?`([\w+,-]+)` (\d+)/(\d+)", part):
                race = catalogue.race(rid or seen[0][0])
                line = next(x for x in fix_lines(race, torch, records_of) if x.name == fix)
                assert (line.count.k, line.count.n) == (int(k), int(n)), (r[:40], fix, line.count)
                checked += 1
    assert checked >= 20
    assert "1.17x eager" in row("1 H200", "launch-bound") and "0.98x raw" in row("1 H200", "gpu-default, compiled")
    gate = json.loads(_newest_gate().read_text())
    autotune = next(p for p in gate["programs"] if p["name"] == "gpu_max_autotune_threadpool")
    assert f"the F1 set failed {autotune['fixed']} on such a program" in TEXT
