"""Claims about `python -m harness`: bad input is one `error:` line, exit 2, store untouched;
stress, replay and run work on tiny command programs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from matrix_specs import command, spec_dict, write_spec
from records import record

from harness.cli import main
from harness.stores import discovery
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent


def _write_spec(tmp_path: Path, **over) -> Path:
    workloads = {"ok": command("-c", "pass"), "bad": command("-c", "import sys; sys.exit(1)")}
    return write_spec(tmp_path, spec_dict(tmp_path, "c", workloads) | over)


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ")
    return err[0]


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"groups": [{"workloads": ["ok"], "strategies": ["global-lok"]}]}, "unknown strategy"),
        ({"groups": [{"workloads": ["ok"], "strategies": ["raw"], "plans": ["swich"]}]}, "malformed plan"),
        (
            {
                "groups": [
                    {
                        "workloads": ["ok"],
                        "strategies": ["raw"],
                        "plans": [{"name": "p", "plan": {"seed": 1, "rules": [{"point": "nope"}]}}],
                    }
                ]
            },
            "malformed plan",
        ),
        ({"workloads": {"ok": {"kind": "command", "argv": [PY, "missing_workload.py"]}}}, "not found"),
    ],
)
def test_bad_matrix_input_is_one_line_exit_2_and_no_store(tmp_path, capsys, over, needle):
    spec = _write_spec(tmp_path, **over)
    assert main(["matrix", "--file", str(spec), "--no-live"]) == 2
    assert needle in _error_line(capsys)
    assert not (tmp_path / "store").exists()


def test_missing_and_malformed_spec_files_are_bad_input(tmp_path, capsys):
    assert main(["matrix", "--file", str(tmp_path / "nope.json")]) == 2
    assert "cannot read matrix spec" in _error_line(capsys)
    (tmp_path / "broken.json").write_text("{not json")
    assert main(["matrix", "--file", str(tmp_path / "broken.json")]) == 2
    assert "not valid JSON" in _error_line(capsys)
    assert main(["matrix", "--preset", "no-such-preset"]) == 2
    assert "unknown preset" in _error_line(capsys)


def test_matrix_without_a_source_runs_the_default_preset():
    from harness.campaign.matrix import presets as matrix_presets
    from harness.cli import build_parser
    from harness.commands.matrix import matrix_from_options

    opts = build_parser().parse_args(["matrix", "--store", "unused"])
    assert matrix_from_options(opts).name == matrix_presets.DEFAULT_PRESET == "cpu-quick"


def test_trials_option_sets_the_default_and_groups_with_their_own_count_keep_it():
    from harness.cli import build_parser
    from harness.commands.matrix import matrix_from_options

    opts = build_parser().parse_args(
        ["matrix", "--preset", "gpu-campaign", "--trials", "30", "--max-failures", "1", "--per-gpu", "6"]
    )
    spec = matrix_from_options(opts)
    counts = {c.name: c.trials for c in spec.cells()}
    assert counts["launch-bound:no-cudagraphs@dflash-stages"] == 30
    assert counts["gpu-bound:eager@-"] == counts["launch-bound:eager@dflash-stages"] == 10
    assert (spec.max_failures, spec.per_gpu) == (1, 6)
    opts = build_parser().parse_args(
        [
            "matrix",
            "--preset",
            "gpu-campaign",
            "--trials",
            "29",
            "--every-group",
            "--cells",
            "gpu-bound:eager@dflash-stages,gpu-bound:raw@-",
        ]
    )
    assert {c.name: c.trials for c in matrix_from_options(opts).cells()} == {
        "gpu-bound:raw@-": 29,
        "gpu-bound:eager@dflash-stages": 29,
    }


def test_every_group_without_trials_is_one_line_exit_2(capsys):
    from harness.cli import main

    assert main(["matrix", "--preset", "gpu-campaign", "--every-group", "--no-live"]) == 2
    assert "--every-group needs --trials" in _error_line(capsys)


def test_cells_option_selects_by_glob_and_an_unmatched_glob_is_one_line_exit_2(tmp_path, capsys):
    from harness.cli import build_parser
    from harness.commands.matrix import matrix_from_options

    opts = build_parser().parse_args(
        [
            "matrix",
            "--preset",
            "gpu-campaign",
            "--cells",
            "*:no-cudagraphs+*@dflash-stages,gpu-bound:eager@-",
            "--cells",
            "launch-bound:*cudagraph-lock*@-",
        ]
    )
    names = [c.name for c in matrix_from_options(opts).cells()]
    assert names == [
        "launch-bound:cstash-tls-init+cudagraph-lock+cublas-handle-init@-",
        "launch-bound:cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init@-",
        "launch-bound:cstash-tls-init+cudagraph-lock+cublas-handle-init+stash-incref@-",
        "launch-bound:cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init"
        "+single-thread-autograd+stash-incref+stream-sync@-",
        "launch-bound:cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init"
        "+single-thread-autograd+stash-incref+stream-sync+nested-fx-fallback@-",
        "launch-bound:no-cudagraphs+single-thread-autograd@dflash-stages",
        "launch-bound:no-cudagraphs+global-lock@dflash-stages",
        "gpu-bound:no-cudagraphs+single-thread-autograd@dflash-stages",
        "gpu-bound:no-cudagraphs+global-lock@dflash-stages",
        "gpu-bound:eager@-",
    ]
    spec = _write_spec(tmp_path)
    assert main(["matrix", "--file", str(spec), "--cells", "ok:nope@-", "--no-live"]) == 2
    assert "matches 'ok:nope@-'" in _error_line(capsys)
    assert not (tmp_path / "store").exists()


def test_unreadable_store_is_bad_input_and_left_byte_for_byte(tmp_path, capsys):
    spec = _write_spec(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    garbage = b'{"trial_id": "c/ok:raw@-/0"}\nnot a record\n'
    (store / "trials.jsonl").write_bytes(garbage)
    assert main(["matrix", "--file", str(spec), "--no-live"]) == 2
    assert "trials.jsonl" in _error_line(capsys)
    assert (store / "trials.jsonl").read_bytes() == garbage
    assert sorted(p.name for p in store.iterdir()) == ["trials.jsonl"]
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "R.md")]) == 2
    _error_line(capsys)
    assert not (tmp_path / "R.md").exists()


def test_matrix_json_summary_then_replay_counts_the_same_signature(tmp_path, capsys):
    spec = _write_spec(tmp_path)
    assert main(["matrix", "--file", str(spec), "--no-live", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cells = {c["cell"]: c for c in out["cells"]}
    assert (cells["bad:raw@-"]["k"], cells["bad:raw@-"]["n"]) == (2, 2)
    assert (cells["ok:raw@-"]["k"], cells["ok:raw@-"]["n"]) == (0, 2)
    store = str(tmp_path / "store")
    assert main(["replay", "c/bad:raw@-/1", "--store", store, "-n", "2", "--json"]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert (replay["reproduced"], replay["replays"], replay["outcome"]) == (2, 2, "CRASH")
    replays = Store(tmp_path / "store" / "replays").load()
    assert [r.trial_id for r in replays] == ["c/bad:raw@-/1~replay0", "c/bad:raw@-/1~replay1"]
    assert all(r.replay_of == "c/bad:raw@-/1" for r in replays)
    assert len(Store(tmp_path / "store").load()) == 4  # the matrix's own records are untouched
    assert main(["replay", "c/nope/0", "--store", store]) == 2
    assert "not found" in _error_line(capsys)


def test_stress_counts_failures_and_stops_at_max_runs(tmp_path, capsys):
    code = "import os, sys; sys.exit(int(os.environ['HARNESS_HEARTBEAT'].split('/')[-2]) % 2)"
    rc = main(
        ["stress", "-p", "2", "--max-runs", "4", "--timeout", "30", "-o", str(tmp_path / "o"), "--", PY, "-c", code]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "4 runs completed, 2 failures (50.00%)" in out
    # Failing runs' folders are kept, passing ones removed.
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.is_dir()) == ["1", "3"]


def test_stress_failure_regexp_filters_what_counts(tmp_path, capsys):
    rc = main(
        [
            "stress",
            "-p",
            "1",
            "--max-runs",
            "2",
            "--failure",
            "^BOOM",
            "-o",
            str(tmp_path / "o"),
            "--",
            PY,
            "-c",
            "print('other'); raise SystemExit(1)",
        ]
    )
    assert rc == 0
    assert "2 runs completed, 0 failures" in capsys.readouterr().out
    assert main(["stress", "--", "no-such-program-xyz"]) == 2
    assert "not found" in _error_line(capsys)


def test_run_one_trial_from_a_spec_file(tmp_path, capsys):
    spec = {
        "trial_id": "one",
        "cell": "c",
        "workload": {"kind": "command", "argv": [PY, "-c", "print(1)"]},
        "timeout_s": 30,
        "hang_s": 30,
    }
    (tmp_path / "t.json").write_text(json.dumps(spec))
    assert main(["run", str(tmp_path / "t.json"), "--artefacts", str(tmp_path / "a")]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "ok"
    (tmp_path / "bad.json").write_text(json.dumps({**spec, "timeout_s": -1}))
    assert main(["run", str(tmp_path / "bad.json")]) == 2
    assert "timeout_s" in _error_line(capsys)


def test_module_entry_point_prints_one_error_line_and_exits_2(tmp_path):
    spec = _write_spec(tmp_path, groups=[{"workloads": ["ok"], "strategies": ["no-such-fix"]}])
    proc = subprocess.run(
        [PY, "-m", "harness", "matrix", "--file", str(spec)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: unknown strategy 'no-such-fix'")


def test_matrix_exits_1_and_names_trials_whose_workload_rejected_its_input(tmp_path, capsys):
    rejects = [PY, "-c", "import sys; print('error: bad flag'); sys.exit(2)"]
    spec = _write_spec(tmp_path, trials=1, workloads={"rej": {"kind": "command", "argv": rejects, "timeout_s": 30}})
    assert main(["matrix", "--file", str(spec), "--no-live"]) == 1
    captured = capsys.readouterr()
    assert "0/0 +1 error" in captured.out
    assert "harness error: c/rej:raw@-/0: workload rejected its input: error: bad flag" in captured.err


def test_a_trial_stored_without_artefacts_is_rebuilt_from_its_matrix_spec(tmp_path):
    # results/catalogue-cpu keeps trials.jsonl only: replay and shrink rebuild the trial from the
    # matrix (same id -> same workload, fixes and plan seed), a store's spec.json or the preset.
    from harness.campaign.replay import load_trial_spec, spec_from_matrix

    store = tmp_path / "store"
    store.mkdir()
    (store / "spec.json").write_text((REPO / "harness" / "campaign" / "specs" / "catalogue-cpu.json").read_text())
    stored = record("catalogue-cpu/r16:raw@reset-pressure/3", Outcome.ABORT, artefacts="/gone/elsewhere")
    spec = load_trial_spec(stored, store)
    assert spec.trial_id == stored.trial_id and spec.workload.argv[0] == "r16_reset_segfault"
    assert spec.plan["profile"] == "reset-pressure" and spec.plan["seed"] == 3
    unknown = TrialResult(trial_id="catalogue-cpu/r16:raw@nope/0", cell="x", trial_index=0, outcome=Outcome.ABORT)
    assert spec_from_matrix(unknown, store) is None
    # A preset's own trials need no spec file.
    quick = record("cpu-quick/r16:raw@reset-pressure/0", Outcome.ABORT)
    assert spec_from_matrix(quick, tmp_path / "empty").plan["profile"] == "reset-pressure"
    # Nor do a spec-file preset's (harness/campaign/specs/catalogue-cpu.json).
    assert spec_from_matrix(stored, tmp_path / "empty").workload.argv[0] == "r16_reset_segfault"


def test_the_main_job_writes_to_runs_and_trial_lookups_look_there_first(tmp_path, monkeypatch):
    # A fresh checkout holds the committed results/cpu-quick complete: the README's main job must
    # run its trials, so its default store is the git-ignored runs/cpu-quick.
    from harness.campaign.matrix import presets as matrix_presets
    from harness.cli import build_parser
    from harness.commands.matrix import matrix_from_options
    from harness.stores.store import Store
    from harness.trial.outcome import Outcome, TrialResult

    spec = matrix_from_options(build_parser().parse_args(["matrix"]))
    assert str(spec.store_dir) == "runs/cpu-quick" == str(matrix_presets.get("cpu-quick").store_dir)
    assert str(matrix_presets.get("gpu-campaign").store_dir) == "results/gpu-campaign"
    monkeypatch.chdir(tmp_path)
    for root in ("results/cpu-quick", "runs/cpu-quick", "results/other"):
        Store(root).append(
            TrialResult(trial_id="cpu-quick/r16:raw@-/0", cell="r16:raw@-", trial_index=0, outcome=Outcome.OK)
        )
    assert [str(p) for p in discovery.trial_stores()] == ["runs/cpu-quick", "results/cpu-quick", "results/other"]
    assert [str(p) for p in discovery.default_stores(Path("results"))] == ["results/cpu-quick", "results/other"]


def test_matrix_summary_says_which_trials_the_clock_left_and_which_the_failure_rule_left(tmp_path, capsys):
    # An H200 run printed "106 left by stop rules" for trials only its --max-time had left.
    slow = {"kind": "command", "argv": [PY, "-c", "import time; time.sleep(0.4)"], "timeout_s": 30}
    spec = _write_spec(
        tmp_path,
        trials=6,
        workers=1,
        max_failures=1,
        workloads={
            "bad": {"kind": "command", "argv": [PY, "-c", "import sys; sys.exit(1)"], "timeout_s": 30},
            "slow": slow,
        },
        groups=[{"workloads": ["bad"], "strategies": ["raw"]}, {"workloads": ["slow"], "strategies": ["raw"]}],
    )
    assert main(["matrix", "--file", str(spec), "--no-live", "--max-time", "1.5"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("matrix c: ran"))
    ran = int(line.split("ran ")[1].split()[0])
    by_time = 12 - ran - 5  # bad's 5 after its first failure go to the rule
    assert by_time > 0, line
    assert line.endswith(f"{12 - ran} left (5 by the failure rule, {by_time} not started before --max-time)"), line
    # A fresh store: 6 slow trials after bad's first cannot all start within 0.5 s.
    spec = _write_spec(
        tmp_path,
        trials=6,
        workers=1,
        max_failures=1,
        store=str(tmp_path / "store2"),
        workloads={
            "bad": {"kind": "command", "argv": [PY, "-c", "import sys; sys.exit(1)"], "timeout_s": 30},
            "slow": slow,
        },
        groups=[{"workloads": ["bad"], "strategies": ["raw"]}, {"workloads": ["slow"], "strategies": ["raw"]}],
    )
    assert main(["matrix", "--file", str(spec), "--no-live", "--json", "--max-time", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["left"] == 5 + out["left_by_time"] and out["left_by_time"] > 0


def test_matrix_finish_by_leaves_a_cell_whose_median_would_overrun_and_says_so(tmp_path, capsys):
    spec = _write_spec(
        tmp_path,
        trials=2,
        workers=1,
        workloads={"w": {"kind": "command", "argv": [PY, "-c", "0"], "timeout_s": 30}},
        groups=[{"workloads": ["w"], "strategies": ["raw"]}],
    )
    Store(tmp_path / "store").append(
        TrialResult(trial_id="c/w:raw@-/0", cell="w:raw@-", trial_index=0, outcome=Outcome.OK, duration_s=600.0)
    )
    assert main(["matrix", "--file", str(spec), "--no-live", "--finish-by", "60"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("matrix c: ran"))
    assert line.endswith("1 left (1 not started before --max-time or to end by --finish-by)"), line
    assert main(["matrix", "--file", str(spec), "--no-live", "--finish-by", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: argument --finish-by")
