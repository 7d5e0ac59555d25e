"""`python -m harness retire`: a changed workload's old records leave the count, not the record."""

from __future__ import annotations

from pathlib import Path

from records import record

from harness.analysis import report
from harness.cli import main
from harness.stores.retire import reasons, retire, retired_store
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult


def _store(tmp_path: Path) -> Path:
    """Matrix m: cell gb:x@- failed twice (artefacts kept), gb:y@- ran clean, lb:x@- failed once."""
    root = tmp_path / "results" / "s"
    for i, (cell, outcome) in enumerate(
        [("gb:x@-", Outcome.CRASH), ("gb:x@-", Outcome.CRASH), ("gb:y@-", Outcome.OK), ("lb:x@-", Outcome.CRASH)]
    ):
        tid = f"m/{cell}/{i}"
        art = root / "artefacts" / f"a{i}"
        art.mkdir(parents=True)
        (art / "output.txt").write_text(f"run {i}\n")
        failed = outcome is Outcome.CRASH
        Store(root).append(
            TrialResult(
                trial_id=tid,
                cell=cell,
                trial_index=i,
                outcome=outcome,
                artefacts=f"results/s/artefacts/a{i}",
                signature="k" if failed else None,
                duration_s=1.0,
                started_at=f"2026-11-30T10:00:0{i}+00:00",
                signature_summary="RuntimeError in t at <inductor-output>:call < torch._inductor.utils:run < "
                "torch._inductor.output_code:__call__: shape '[<int>, <int>]' is invalid for "
                "input of size <int>"
                if failed
                else None,
                torch_version="2.11.0",
            )
        )
    return root


def test_retired_records_and_artefacts_move_and_their_cells_are_pending_again(tmp_path):
    root = _store(tmp_path)
    done = retire(root, ["gb:*"], "trainer now disables mix-order reduction")
    assert (done.records, done.cells) == (3, 2)
    assert [r.cell for r in Store(root).load()] == ["lb:x@-"]
    moved = retired_store(root).load()
    assert [r.trial_id for r in moved] == ["m/gb:x@-/0", "m/gb:x@-/1", "m/gb:y@-/2"]
    assert moved[0].artefacts == "results/s/retired/artefacts/a0"
    assert (root / "retired" / "artefacts" / "a0" / "output.txt").read_text() == "run 0\n"
    assert not (root / "artefacts" / "a0").exists() and (root / "artefacts" / "a3").exists()
    (entry,) = reasons(root)
    assert entry["cells"] == ["gb:*"] and entry["records"] == 3 and "mix-order" in entry["reason"]


def test_a_cell_retired_twice_keeps_both_generations(tmp_path):
    root = _store(tmp_path)
    retire(root, ["lb:x@-"], "first")
    # The cell reran: same trial id, same artefacts folder name.
    (root / "artefacts" / "a3").mkdir()
    (root / "artefacts" / "a3" / "output.txt").write_text("rerun\n")
    Store(root).append(
        record(
            "m/lb:x@-/3",
            artefacts="results/s/artefacts/a3",
            started_at="2026-12-01T00:00:00+00:00",
        )
    )
    retire(root, ["lb:x@-"], "second")
    arts = sorted(p.name for p in (root / "retired" / "artefacts").iterdir())
    assert arts == ["a3", "a3-retired2"]
    assert (root / "retired" / "artefacts" / "a3-retired2" / "output.txt").read_text() == "rerun\n"
    assert [e["reason"] for e in reasons(root)] == ["first", "second"]


def test_an_interrupted_retire_completes_without_duplicates(tmp_path):
    root = _store(tmp_path)
    records = Store(root).load()
    retired_store(root).append(records[3])  # moved, but the store was not rewritten yet
    retire(root, ["lb:x@-"], "again")
    assert [r.trial_id for r in retired_store(root).load()] == ["m/lb:x@-/3"]
    assert [r.cell for r in Store(root).load()] == ["gb:x@-", "gb:x@-", "gb:y@-"]


def test_bad_input_is_one_line_exit_2_and_nothing_moves(tmp_path, capsys):
    root = _store(tmp_path)
    before = (root / "trials.jsonl").read_bytes()
    for argv, message in [
        (["--store", str(tmp_path / "nope"), "--cells", "gb:*", "--reason", "r"], "no result store at"),
        (["--store", str(root), "--cells", "zz:*", "--reason", "r"], "has a cell matching zz:*"),
        (["--store", str(root), "--cells", "gb:*", "--reason", "  "], "--reason must say why"),
        (["--store", str(root), "--cells", ",", "--reason", "r"], "--cells needs at least one"),
    ]:
        assert main(["retire", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert (root / "trials.jsonl").read_bytes() == before and not (root / "retired").exists()
    assert main(["retire", "--store", str(root), "--cells", "gb:x@-,gb:y@-", "--reason", "workaround"]) == 0
    assert "retired 3 records of 2 cells" in capsys.readouterr().out


def test_the_report_names_retired_records_and_still_counts_their_failures(tmp_path):
    root = _store(tmp_path)
    retire(root, ["gb:*"], "trainer now disables mix-order reduction")
    out = tmp_path / "REPORT.md"
    out.write_text("# R\n")
    report.rebuild([root], out, overview=True)
    summary = (root / report.SUMMARY_NAME).read_text()  # a store's tables sit beside it
    block = summary[summary.index("harness:begin m") :]
    assert "| lb:x@- | 1/1 |" in block and "gb:x@-" not in block.split("Retired")[0]
    assert (
        "Retired (`python -m harness retire`; kept in `results/s/retired`, not in the tables above): "
        "3 records of 2 cells; failures by family: mix-order 2. Why:"
    ) in block
    assert "cells `gb:*`, 3 records: trainer now disables mix-order reduction" in block
    modes = (tmp_path / "results" / report.FAILURE_MODES_NAME).read_text()
    overview = modes[: modes.index("harness:end failure-modes")]
    assert "| mix-order |" in overview and "| 3 (m) |" in overview  # 2 retired + 1 kept


def test_show_finds_a_retired_trial_and_says_why_it_left_the_count(tmp_path, monkeypatch, capsys):
    root = _store(tmp_path)
    retire(root, ["gb:x@-"], "mix-order workaround")
    retire(root, ["lb:*"], "copy bug")
    monkeypatch.chdir(tmp_path)  # default stores: results/*, then their retired/
    assert main(["show", "m/gb:x@-/1"]) == 0
    out = capsys.readouterr().out
    assert "retired from results/s (not counted there): mix-order workaround\n" in out
    assert "copy bug" not in out
