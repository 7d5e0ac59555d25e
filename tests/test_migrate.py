"""`harness migrate`: a store's records gain the cell's parts as fields, nothing else changes."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.stores.migrate import migrate_store
from harness.stores.store import StoreError


def _old(cell: str, i: int) -> dict:
    return {
        "trial_id": f"m/{cell}/{i}",
        "cell": cell,
        "trial_index": i,
        "outcome": "ok",
        "from_a_newer_version": {"kept": True},
    }


def test_old_records_gain_workload_strategy_fixes_and_plan_and_keep_unknown_keys(tmp_path, capsys):
    store = tmp_path / "s"
    store.mkdir()
    lines = [_old("r06:raw@fx-widen", 0), _old("tiny-ro:no-cudagraphs+global-lock@dflash-stages", 1), _old("stress", 2)]
    (store / "trials.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines) + '{"torn')
    done = migrate_store(store)
    assert (done.records, done.filled) == (3, 3)
    got = [json.loads(line) for line in (store / "trials.jsonl").read_text().splitlines()]
    assert [(d["workload"], d["strategy"], d["fixes"], d["plan"]) for d in got] == [
        ("r06", "raw", [], "fx-widen"),
        ("tiny-ro", "no-cudagraphs+global-lock", ["global-lock"], "dflash-stages"),
        ("stress", "", [], "-"),
    ]
    assert all(d["from_a_newer_version"] == {"kept": True} for d in got)
    before = (store / "trials.jsonl").read_bytes()
    assert main(["migrate", "--store", str(store)]) == 0
    assert "3 records, all up to date" in capsys.readouterr().out
    assert (store / "trials.jsonl").read_bytes() == before


def test_a_record_stored_with_its_fields_keeps_them(tmp_path):
    store = tmp_path / "s"
    store.mkdir()
    d = {**_old("w:a+b@p", 0), "workload": "w", "strategy": "a+b", "fixes": ["a"], "plan": "p"}
    (store / "trials.jsonl").write_text(json.dumps(d) + "\n")
    assert migrate_store(store).filled == 0
    assert json.loads((store / "trials.jsonl").read_text())["fixes"] == ["a"]


def test_a_folder_without_a_store_is_one_error_line(tmp_path, capsys):
    assert main(["migrate", "--store", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no result store at") and err.count("\n") == 1


def test_every_committed_record_says_what_ran():
    # Readers group by these fields; a store merged from an older runner is migrated before it is
    # committed (`python -m harness migrate`).
    from pathlib import Path

    from harness.stores.migrate import FIELDS

    stale = []
    for path in sorted(Path(__file__).resolve().parents[1].glob("results/**/trials.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if any(f not in json.loads(line) for f in FIELDS):
                stale.append(f"{path.parent.name}:{n}")
    assert stale == [], f"{len(stale)} records without {FIELDS}, first {stale[:3]}"


def _spec_v1(trial_id: str, env: dict) -> dict:
    """A command run's spec.json as the runner wrote it before format 2."""
    workload = {"kind": "command", "argv": ["python", "prog.py"]}
    return {"trial_id": trial_id, "cell": "stress", "workload": workload, "fixes": [], "plan": None, "env": env}


def test_a_runs_spec_of_format_1_is_rewritten_as_it_ran_once(tmp_path, capsys):
    store = tmp_path / "s"
    (store / "artefacts").mkdir(parents=True)
    (store / "trials.jsonl").write_text(json.dumps({**_old("stress", 0), "workload": "stress"}) + "\n")
    runs = {"none": {"HARNESS_FIXES": "none", "KEEP": "1"}, "as-is": {"KEEP": "1"}}
    for name, env in runs.items():
        (store / "artefacts" / name).mkdir()
        (store / "artefacts" / name / "spec.json").write_text(json.dumps(_spec_v1(f"stress/{name}", env)))
    assert migrate_store(store).specs == 2
    got = {name: json.loads((store / "artefacts" / name / "spec.json").read_text()) for name in runs}
    assert got["none"]["format"] == got["as-is"]["format"] == 2
    assert (got["none"]["fixes"], got["none"]["env"]) == ([], {"KEEP": "1"})  # `--fix none`: the guard, no fix
    assert (got["as-is"]["fixes"], got["as-is"]["env"]) == (None, {"KEEP": "1"})  # no --fix: as it is
    before = {name: (store / "artefacts" / name / "spec.json").read_bytes() for name in runs}
    assert main(["migrate", "--store", str(store)]) == 0
    assert "spec.json" not in capsys.readouterr().out
    assert {name: (store / "artefacts" / name / "spec.json").read_bytes() for name in runs} == before


def test_a_damaged_store_is_one_error_and_its_specs_stay_as_they_were(tmp_path):
    store = tmp_path / "s"
    (store / "artefacts" / "none").mkdir(parents=True)
    spec = store / "artefacts" / "none" / "spec.json"
    spec.write_text(json.dumps(_spec_v1("stress/none", {"HARNESS_FIXES": "none"})))
    (store / "trials.jsonl").write_text("not json\n" + json.dumps(_old("stress", 0)) + "\n")
    before = spec.read_bytes()
    with pytest.raises(StoreError):
        migrate_store(store)
    assert spec.read_bytes() == before
