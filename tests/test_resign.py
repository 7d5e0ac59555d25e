"""`python -m harness resign`: stored signatures of an older version regrouped from artefacts."""

from __future__ import annotations

import shutil
from pathlib import Path

from records import record

from harness.cli import main
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.signature import SIGNATURE_VERSION, crash_signature

FIXTURES = Path(__file__).parent / "fixtures" / "tracebacks"


def _store(tmp_path: Path) -> tuple[Path, list[TrialResult]]:
    """Two v3 GC segfaults with their v3 keys (split by frame), one current crash, one without
    artefacts, one OK trial."""
    root = tmp_path / "store"
    records = []
    for i, n in enumerate((4, 5)):  # two of gpu_segv_during_gc 1-5
        art = root / "artefacts" / f"t{i}"
        art.mkdir(parents=True)
        shutil.copy(FIXTURES / "gpu_segv_during_gc" / f"{n}.txt", art / "output.txt")
        records.append(
            record(
                f"m/c/{i}",
                Outcome.ABORT,
                rc=-11,
                signature=f"old-key-{i}",
                signature_summary=f"old summary {i}",
                signature_version=3,
                artefacts=str(art.relative_to(tmp_path)),
            )
        )
    records.append(
        record(
            "m/c/2",
            Outcome.CRASH,
            signature="current",
            signature_version=SIGNATURE_VERSION,
            artefacts=None,
        )
    )
    records.append(
        record(
            "m/c/3",
            Outcome.CRASH,
            signature="gone",
            signature_version=1,
            artefacts="store/artefacts/none",
        )
    )
    records.append(TrialResult(trial_id="m/c/4", cell="c", trial_index=4, outcome=Outcome.OK))
    for r in records:
        Store(root).append(r)
    return root, records


def test_resign_regroups_older_records_from_their_artefacts(tmp_path, monkeypatch, capsys):
    root, _ = _store(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["resign", "--store", "store"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"store: 2 of 3 older signatures recomputed to v{SIGNATURE_VERSION} (2 changed key), "
        "1 without artefacts, 5 records"
    )
    got = {r.trial_id: r for r in Store(root).load()}
    want = crash_signature((FIXTURES / "gpu_segv_during_gc" / "4.txt").read_text(), rc=-11)
    assert got["m/c/0"].signature == got["m/c/1"].signature == want.key  # one bug, one key again
    assert got["m/c/0"].signature_version == SIGNATURE_VERSION
    assert got["m/c/0"].signature_summary == "Segmentation fault: during garbage collection"
    assert (got["m/c/2"].signature, got["m/c/3"].signature) == ("current", "gone")
    assert got["m/c/4"].outcome is Outcome.OK and got["m/c/4"].signature is None
    # A second run has nothing left to do and leaves the file byte for byte.
    before = (root / "trials.jsonl").read_bytes()
    assert main(["resign", "--store", "store"]) == 0
    assert "0 of 1 older signatures recomputed" in capsys.readouterr().out
    assert (root / "trials.jsonl").read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == ["artefacts", "trials.jsonl"]  # no temp file left


def test_resign_of_a_missing_store_is_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["resign", "--store", "nowhere"]) == 2
    assert capsys.readouterr().err.strip() == "error: no result store at nowhere (no trials.jsonl)"


def test_resign_also_regroups_a_stores_retired_records(tmp_path, monkeypatch, capsys):
    from harness.stores.retire import retire, retired_store

    root, _ = _store(tmp_path)
    monkeypatch.chdir(tmp_path)
    retire(root, ["c"], "workload changed")  # every record, artefacts with them
    assert main(["resign", "--store", "store"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == (
        f"store/retired: 2 of 3 older signatures recomputed to v{SIGNATURE_VERSION} "
        "(2 changed key), 1 without artefacts, 5 records"
    )
    moved = {r.trial_id: r for r in retired_store(root).load()}
    assert moved["m/c/0"].signature_summary == "Segmentation fault: during garbage collection"
