"""`python -m harness merge`: two copies of a store that each gained trials become one store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from records import record

from harness.cli import main
from harness.stores.merge import MergeError, merge
from harness.stores.retire import reasons, retire, retired_store
from harness.stores.store import Store, safe_name
from harness.trial.outcome import Outcome, TrialResult


def _add(root: Path, cell: str, index: int, started: str, text: str, *, outcome=Outcome.OK, attempt="") -> None:
    tid = f"m/{cell}/{index}"
    name = safe_name(tid) + attempt
    art = root / "artefacts" / name
    art.mkdir(parents=True)
    (art / "output.txt").write_text(text)
    (art / "spec.json").write_text(json.dumps({"trial_id": tid, "trial_index": index, "cell": cell}))
    Store(root).append(
        TrialResult(
            trial_id=tid,
            cell=cell,
            trial_index=index,
            outcome=outcome,
            artefacts=f"results/s/artefacts/{name}",
            duration_s=10.0 + index,
            started_at=started,
            plan_seed=index,
            torch_version="2.11.0",
        )
    )


def _forked(tmp_path: Path) -> tuple[Path, Path]:
    """A store both runs started from (one record), then each run's own new trials: both ran
    `m/a@-/1`, only the first ran `m/b@-/0`, only the second `m/a@-/2` (an OOM rerun's folder)."""
    base = tmp_path / "base"
    _add(base, "a@-", 0, "2026-11-30T10:00:00+00:00", "old\n")
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(base, first)
    shutil.copytree(base, second)
    _add(first, "a@-", 1, "2026-11-30T11:00:00+00:00", "run 12\n", outcome=Outcome.CRASH)
    _add(first, "b@-", 0, "2026-11-30T11:00:05+00:00", "run 12 b\n")
    _add(second, "a@-", 1, "2026-11-30T12:00:00+00:00", "run 13\n")
    _add(second, "a@-", 2, "2026-11-30T12:01:00+00:00", "run 13 retry\n", attempt="-attempt1")
    return first, second


def test_the_second_runs_trials_join_the_first_and_a_clashing_id_gets_the_next_index(tmp_path):
    first, second = _forked(tmp_path)
    done = merge(second, first)
    assert (done.added, done.renumbered, done.present) == (2, 1, 1)
    # Both runs ran a@-/1, so under seed 1: the renumbered copy repeats that schedule; the retry
    # a@-/2 ran a seed the first run never did.
    assert done.repeated_seeds == 1
    records = Store(first).load()
    assert [(r.trial_id, r.started_at[11:16]) for r in records] == [
        ("m/a@-/0", "10:00"),
        ("m/a@-/1", "11:00"),
        ("m/b@-/0", "11:00"),
        ("m/a@-/3", "12:00"),
        ("m/a@-/2", "12:01"),
    ]
    moved = records[3]
    # The renumbered run keeps the schedule it ran under and its own files, under its new id.
    assert (moved.trial_index, moved.plan_seed, moved.outcome) == (3, 1, Outcome.OK)
    assert moved.artefacts == f"results/s/artefacts/{safe_name('m/a@-/3')}"
    assert (first / "artefacts" / safe_name("m/a@-/3") / "output.txt").read_text() == "run 13\n"
    # replay reads the spec: it names the new id now (the source's copy is untouched).
    spec = json.loads((first / "artefacts" / safe_name("m/a@-/3") / "spec.json").read_text())
    assert (spec["trial_id"], spec["trial_index"]) == ("m/a@-/3", 3)
    assert json.loads((second / "artefacts" / safe_name("m/a@-/1") / "spec.json").read_text())["trial_id"] == "m/a@-/1"
    assert (first / "artefacts" / safe_name("m/a@-/1") / "output.txt").read_text() == "run 12\n"
    assert records[4].artefacts.endswith(safe_name("m/a@-/2") + "-attempt1")
    assert (first / "artefacts" / (safe_name("m/a@-/2") + "-attempt1") / "output.txt").read_text() == "run 13 retry\n"


def test_a_retry_of_an_out_of_memory_trial_joins_it_and_a_second_copy_of_a_retry_is_renumbered(tmp_path):
    base = tmp_path / "base"
    _add(base, "a@-", 0, "2026-11-30T10:00:00+00:00", "oom\n", outcome=Outcome.RESOURCE)
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(base, first)
    shutil.copytree(base, second)
    _add(first, "a@-", 0, "2026-11-30T11:00:00+00:00", "retry 12\n", attempt="-attempt1")
    _add(second, "a@-", 0, "2026-11-30T12:00:00+00:00", "retry 13\n", attempt="-attempt1")
    into = tmp_path / "into"
    merge(base, into)
    retry = merge(first, into)  # the retry the matrix would have run here
    assert (retry.renumbered, retry.repeated_seeds) == (0, 0)
    again = merge(second, into)  # the same retry once more: a run of its own,
    assert (again.renumbered, again.repeated_seeds) == (1, 1)  # under the schedule /0 ran
    records = Store(into).load()
    assert [(r.trial_id, Path(r.artefacts).name) for r in records] == [
        ("m/a@-/0", safe_name("m/a@-/0")),
        ("m/a@-/0", safe_name("m/a@-/0") + "-attempt1"),
        ("m/a@-/1", safe_name("m/a@-/1")),
    ]
    assert (into / "artefacts" / safe_name("m/a@-/1") / "output.txt").read_text() == "retry 13\n"


def test_merging_again_changes_nothing(tmp_path):
    first, second = _forked(tmp_path)
    merge(second, first)
    before = (first / "trials.jsonl").read_bytes()
    again = merge(second, first)
    assert (again.added, again.present) == (0, 3)
    assert (first / "trials.jsonl").read_bytes() == before


def test_an_interrupted_merge_is_completed_by_a_rerun(tmp_path):
    first, second = _forked(tmp_path)
    # Interrupted after copying a folder but before appending its record.
    stray = first / "artefacts" / safe_name("m/a@-/2")
    stray.mkdir()
    (stray / "half").write_text("partial copy\n")
    merge(second, first)
    assert len(Store(first).load()) == 5


def test_retired_records_and_reasons_follow(tmp_path):
    first, second = _forked(tmp_path)
    retire(second, ["a@-"], "workload changed")
    done = merge(second, first)
    assert done.retired == 3
    assert [r.trial_id for r in retired_store(first).load()] == ["m/a@-/0", "m/a@-/1", "m/a@-/2"]
    assert [e["reason"] for e in reasons(first)] == ["workload changed"]
    merge(second, first)
    assert len(retired_store(first).load()) == 3 and len(reasons(first)) == 1


def test_a_store_into_a_fresh_folder_is_a_copy(tmp_path):
    first, _ = _forked(tmp_path)
    done = merge(first, tmp_path / "new")
    assert done.added == 3 and [r.trial_id for r in Store(tmp_path / "new").load()] == [
        r.trial_id for r in Store(first).load()
    ]


@pytest.mark.parametrize("case", ["no-store", "itself", "other-matrix"])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, case):
    first, second = _forked(tmp_path)
    if case == "other-matrix":
        other = tmp_path / "other"
        Store(other).append(
            record(
                "n/a@-/0",
                started_at="2026-11-30T09:00:00+00:00",
            )
        )
        sources = [str(second), str(other)]
    else:
        sources = {"no-store": [str(second), str(tmp_path / "missing")], "itself": [str(first)]}[case]
    before = (first / "trials.jsonl").read_bytes()
    assert main(["merge", *sources, "--into", str(first)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert (first / "trials.jsonl").read_bytes() == before
    with pytest.raises(MergeError):
        merge(sources[-1], first)


def test_cli_prints_one_line_per_source(tmp_path, capsys):
    first, second = _forked(tmp_path)
    assert main(["merge", str(second), "--into", str(first)]) == 0
    out = capsys.readouterr().out
    assert "2 records added (1 under a new trial index), 1 already there" in out
    assert "1 of them repeat a scheduler seed their cell already held" in out
