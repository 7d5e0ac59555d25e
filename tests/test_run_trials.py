"""tools/run_trials.py: the per-run figures REPORT.md quotes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.run_trials", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_runs_45_to_47_as_the_report_quotes_them():
    out = _run("45", "46", "47").stdout
    # docs/log/2026-12-01-finish-by.md: 16, 37 and 38 trials; 1,551, 1,694 and 1,824
    # trial-seconds; a cold cache in run 45 and F1 reached sooner on the warm machine of runs 46-47.
    assert "run 45: 16 trials, 1,551 trial-seconds; Inductor cache at the start 3.0M" in out
    assert "run 46: 37 trials, 1,694 trial-seconds; Inductor cache at the start 396M" in out
    assert "run 47: 38 trials, 1,824 trial-seconds; Inductor cache at the start 414M" in out
    assert "F1 time to failure: median 41.7 s over 9" in out
    assert "F1 time to failure: median 35.6 s over 28" in out


def test_the_default_logs_and_store_are_the_checkouts_wherever_it_runs(tmp_path):
    # Found from the module's own place: run from elsewhere (the package on PYTHONPATH), run 45
    # reads the same as from the repository root.
    out = _run("45", cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.startswith("run 45: 16 trials, 1,551 trial-seconds")


def test_a_run_ends_at_its_done_line_not_at_its_budget(tmp_path):
    # Run 45's budget (585 s from 21:17:03) goes past run 46's start (21:26:28, a warm machine):
    # by the budget, run 45 would take two of run 46's trials.
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run45-log.txt").write_text(
        (ROOT / "results/h200-campaign/run45-log.txt").read_text().replace("== done after 540s", "")
    )
    out = _run("45", "--logs", str(logs)).stdout
    assert out.startswith("run 45: 18 trials")


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args, want in (
        (["99"], "error: no log for run 99"),
        (["45", "--store", str(tmp_path)], "error: no result store"),
    ):
        proc = _run(*args)
        assert proc.returncode == 2 and proc.stderr.startswith(want) and not proc.stdout, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "run7-log.txt").write_text("not a run log\n")
    proc = _run("7", "--logs", str(tmp_path))
    assert proc.returncode == 2 and "the first line is not h200_run.sh's" in proc.stderr


def test_all_lists_every_trial_with_its_family_and_memory():
    out = _run("42", "43", "--all").stdout
    assert (
        "crash (capture) gpu-campaign/gpu-bound:cstash-tls-init+graph-isolation+sequential-startup@-/3: "
        "- tokens/s, 54.2 GiB, 50.0 s" in out
    )
    assert (
        "ok gpu-campaign/gpu-bound:cstash-tls-init+graph-isolation+sequential-startup@-/4: 24,657 tokens/s, "
        "68.0 GiB" in out
    )
    assert "\n  crash" not in _run("42", "43").stdout  # without --all: the passing trials only


def test_malformed_times_and_stores_are_bad_input_too(tmp_path):
    log = (ROOT / "results/h200-campaign/run45-log.txt").read_text()
    store = tmp_path / "store"
    store.mkdir()
    line = next(
        x
        for x in (ROOT / "results/gpu-campaign/trials.jsonl").read_text().splitlines()
        if '"started_at": "2026-12-01T21:42:27+00:00"' in x
    )  # a run-47 record
    cases = [
        ("== garbageZ budget 585 phases x\n", line, "the first line is not h200_run.sh's"),
        ("== 2026-12-01T25:17:03Z budget 585 phases x\n", line, "the first line is not h200_run.sh's"),
        (
            log,
            line.replace('"started_at": "2026-12-01T21:42:27+00:00"', '"started_at": "yesterday"'),
            "started_at 'yesterday' is not an ISO time",
        ),
        (
            log,
            line.replace('"started_at": "2026-12-01T21:42:27+00:00"', '"started_at": "2026-12-01T21:42:27"'),
            "is not an ISO time with its offset",
        ),
        (log, "not json", "error: "),
    ]
    for text, record, want in cases:
        (tmp_path / "run7-log.txt").write_text(text)
        (store / "trials.jsonl").write_text(record + "\n")
        proc = _run("7", "--logs", str(tmp_path), "--store", str(store))
        assert proc.returncode == 2 and want in proc.stderr and not proc.stdout, (want, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_run_with_no_trials_says_so(tmp_path):
    (tmp_path / "run7-log.txt").write_text("== 2020-01-01T00:00:00Z budget 10 phases x\n== done after 5s\n")
    out = _run("7", "--logs", str(tmp_path)).stdout
    assert out.splitlines()[:3] == [
        "run 7: 0 trials, 0 trial-seconds; Inductor cache at the start ?",
        "  outcomes: -",
        "  families: -",
    ]


def test_memory_lines_give_runs_39_to_41s_sample_against_allocator_figures():
    # docs/log/2026-12-01-runner-gpu-memory-samples.md: over runs 39-41, 49 trials with both
    # figures, the sample higher by a median 0.88 GiB and lower by 4.39 in one trial; the G2 hangs
    # held 2.9 to 24.5 GiB.
    out = _run("39", "40", "41").stdout
    assert out.splitlines()[-1] == (
        "runs 39, 40, 41 together, memory: sampled in 58 of 58 trials; sample minus "
        "allocator peak over the 49 with both: median +0.88 GiB, -4.39 to +1.07"
    )
    assert "hangs ran 196.7-199.4 s (2), held 8.7, 14.4 GiB (sampled)" in out
    assert "held 2.9, 2.9, 2.9 GiB (sampled)" in out
    assert "together" not in _run("41").stdout  # one run: no total line


def test_seeds_counts_the_distinct_schedules_of_each_stressed_cell():
    # docs/log/2026-12-01-launch-bound-cells-10-trials.md: run 37 started from a store without
    # run 36's trials and handed out the same seeds, so 9 trials of a stressed cell ran under 5 or
    # 6 schedules.
    out = _run("36", "37", "38", "--seeds").stdout
    seeds = out[out.index("scheduler seeds, runs 36, 37, 38:") :].splitlines()[1:]
    assert "  launch-bound:raw@dflash-stages: 9 trials, 5 distinct scheduler seeds" in seeds
    assert "  launch-bound:thread-local-warmup@dflash-stages: 9 trials, 6 distinct scheduler seeds" in seeds
    assert all("@dflash-stages" in line for line in seeds)  # cells without a plan have no seed
    assert "scheduler seeds" not in _run("36").stdout
