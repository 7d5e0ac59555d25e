"""`python -m harness pack`: finished trial folders become one zip each, and every reader of a
store (show, replay, resign, the report, merge, retire) reads them as it read the folders."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from records import record

from harness.analysis import excerpts
from harness.analysis.show import render
from harness.campaign.replay import load_trial_spec
from harness.cli import main
from harness.stores import resign
from harness.stores.merge import merge
from harness.stores.retire import retire, retired_store
from harness.stores.store import Store, StoreError, safe_name
from harness.stores.zips import pack_store
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.spec import TrialSpec, WorkloadSpec

TRACEBACKS = Path(__file__).parent / "fixtures" / "tracebacks"
NATIVE = "# h: 2 frames\nlibtorch_python.so(+0x1) std::x::operator[]\nlibtorch_python.so(+0x2) create_cache_entry\n"


def _store(root: Path, hour: int = 10) -> Store:
    """A crash, a native crash and a hang, each with the files the runner keeps for it, their
    signatures one version old (so `resign` recomputes them from the artefacts)."""
    store = Store(root)
    kinds = [
        (Outcome.CRASH, {"output.txt": (TRACEBACKS / "gpu_f1_backward" / "1.txt").read_text()}),
        (
            Outcome.ABORT,
            {"output.txt": (TRACEBACKS / "r5_reset_fpe" / "1.txt").read_text(), "native_stack.txt": NATIVE},
        ),
        (
            Outcome.HANG,
            {
                "pyspy.json": (TRACEBACKS / "gpu_hang_flex_backward_compile" / "1.pyspy.json").read_text(),
                "heartbeat": "12\n",
            },
        ),
    ]
    for i, (outcome, files) in enumerate(kinds):
        tid = f"m/w:raw@-/{i}"
        art = store.artefacts_dir(tid)
        spec = TrialSpec(
            trial_id=tid,
            cell="w:raw@-",
            trial_index=i,
            workload=WorkloadSpec(kind="command", argv=(sys.executable, "-c", "pass")),
            timeout_s=60,
            hang_s=30,
        )
        (art / "spec.json").write_text(json.dumps(spec.to_json()))
        for name, text in files.items():
            (art / name).write_text(text)
        store.append(
            TrialResult(
                trial_id=tid,
                cell="w:raw@-",
                trial_index=i,
                outcome=outcome,
                rc=-8 if i == 1 else 1,
                signature="old",
                signature_summary="old",
                signature_version=1,
                artefacts=f"results/m/artefacts/{art.name}",
                duration_s=5.0 + i,
                started_at=f"2026-12-01T{hour}:0{i}:00+00:00",
            )
        )
    return store


def _readings(store: Store) -> dict:
    """Everything the readers make of the store's artefacts."""
    records = store.load()
    return {
        "hangs": excerpts.hang_excerpts(records, store.root),
        "native": excerpts.native_excerpts(records, store.root),
        "resign": [resign.recompute(r, store) for r in records],
        "specs": [load_trial_spec(r, store.root) for r in records],
        # show names where the artefacts are: the folder before, the zip after
        "show": [
            [line for line in render(r, store.root).splitlines() if not line.startswith("artefacts:")] for r in records
        ],
    }


def test_a_packed_store_reads_as_it_did_unpacked_with_one_zip_per_trial(tmp_path):
    store = _store(tmp_path / "m")
    before = _readings(store)
    assert before["native"] and before["hangs"] and all(before["resign"])  # the fixture is read at all
    (done,) = pack_store(store.root)
    assert (done.folders, done.files, done.left) == (3, 8, 0)
    arts = store.root / "artefacts"
    assert sorted(p.name for p in arts.iterdir()) == [safe_name(f"m/w:raw@-/{i}") + ".zip" for i in range(3)]
    assert isinstance(store.artefacts_of(store.load()[2]), zipfile.Path)
    assert _readings(store) == before
    assert "artefacts: " + str(arts / (safe_name("m/w:raw@-/2") + ".zip")) in render(store.load()[2], store.root)
    # Nothing left to pack: a second run changes nothing.
    (again,) = pack_store(store.root)
    assert again.folders == 0 and _readings(store) == before


def test_the_same_folder_packs_to_the_same_bytes(tmp_path):
    zips = []
    for name in ("a", "b"):
        store = _store(tmp_path / name)
        pack_store(store.root)
        zips.append((store.root / "artefacts" / (safe_name("m/w:raw@-/1") + ".zip")).read_bytes())
    assert zips[0] == zips[1]


def test_a_folder_without_a_record_is_left_for_the_runner(tmp_path):
    store = _store(tmp_path / "m")
    running = store.artefacts_dir("m/w:raw@-/3")  # a trial in flight: no record yet
    (running / "output.txt").write_text("step 1\n")
    (done,) = pack_store(store.root)
    assert (done.folders, done.left) == (3, 1)
    assert (running / "output.txt").read_text() == "step 1\n"


def test_a_folder_beside_its_zip_is_read_as_the_zip_and_removed_when_it_holds_nothing_else(tmp_path):
    store = _store(tmp_path / "m")
    before = _readings(store)
    pack_store(store.root)
    shell = store.root / "artefacts" / safe_name("m/w:raw@-/1")
    shell.mkdir()  # the device's copy of an uncommitted pack: empty folders
    half = store.root / "artefacts" / safe_name("m/w:raw@-/2")
    half.mkdir()  # a pack stopped between the rename and the removal
    with zipfile.ZipFile(half.with_name(half.name + ".zip")) as zf:
        zf.extractall(half)
    stray = store.root / "artefacts" / ".m_w_raw_-_0.x.tmp"
    stray.write_bytes(b"PK")  # one stopped before its rename
    assert _readings(store) == before
    (done,) = pack_store(store.root)
    assert done.folders == 0 and not shell.exists() and not half.exists() and not stray.exists()
    assert _readings(store) == before


def test_a_folder_that_differs_from_its_zip_is_an_error_and_both_stay(tmp_path, capsys):
    store = _store(tmp_path / "m")
    pack_store(store.root)
    folder = store.root / "artefacts" / safe_name("m/w:raw@-/0")
    folder.mkdir()
    (folder / "output.txt").write_text("something else\n")
    with pytest.raises(StoreError, match="differs from"):
        pack_store(store.root)
    assert main(["pack", "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert (folder / "output.txt").is_file() and folder.with_name(folder.name + ".zip").is_file()


def test_pack_of_a_folder_that_is_not_a_store_writes_nothing_and_exits_2(tmp_path, capsys):
    good = _store(tmp_path / "m")
    assert main(["pack", "--store", str(good.root), "--store", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: no result store at {tmp_path / 'nope'} (no trials.jsonl)\n"
    assert not list((good.root / "artefacts").glob("*.zip"))  # checked before any was packed


def test_pack_prints_one_line_per_store_and_its_retired_store(tmp_path, capsys):
    store = _store(tmp_path / "m")
    retire(store.root, ["w:raw@-"], "the workload changed")
    assert main(["pack", "--store", str(store.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{store.root}: nothing to pack (0 folder(s) without a record left as they are)"
    assert lines[1].startswith(f"{store.root / 'retired'}: packed 3 trial folder(s), 8 files, ")


def test_merge_from_a_packed_store_copies_its_trials_as_folders_under_their_new_ids(tmp_path):
    src, dest = _store(tmp_path / "src"), Store(tmp_path / "dest")
    pack_store(src.root)
    # dest ran its own m/w:raw@-/0: src's 0 is another run and is renumbered to 3
    art = dest.artefacts_dir("m/w:raw@-/0")
    (art / "output.txt").write_text("dest's own\n")
    dest.append(
        record(
            "m/w:raw@-/0",
            artefacts=f"results/m/artefacts/{art.name}",
            duration_s=1.0,
            started_at="2026-12-01T09:00:00+00:00",
        )
    )
    done = merge(src.root, dest.root)
    assert (done.added, done.renumbered) == (3, 1)
    moved = dest.root / "artefacts" / safe_name("m/w:raw@-/3")
    assert (
        moved.is_dir() and (moved / "output.txt").read_text() == (TRACEBACKS / "gpu_f1_backward" / "1.txt").read_text()
    )
    assert json.loads((moved / "spec.json").read_text())["trial_id"] == "m/w:raw@-/3"
    assert (art / "output.txt").read_text() == "dest's own\n"
    (packed,) = pack_store(dest.root)
    assert packed.folders == 4


def test_retire_moves_a_packed_trial_as_its_zip_and_show_reads_it_there(tmp_path):
    store = _store(tmp_path / "m")
    before = [
        line
        for line in render(store.load()[1], store.root).splitlines()
        if line.startswith(("native crash site", "  libtorch"))
    ]
    pack_store(store.root)
    retire(store.root, ["w:raw@-"], "the workload changed")
    old = retired_store(store.root)
    assert sorted(p.name for p in (old.root / "artefacts").iterdir()) == [
        safe_name(f"m/w:raw@-/{i}") + ".zip" for i in range(3)
    ]
    record = old.load()[1]
    assert isinstance(old.artefacts_of(record), zipfile.Path)
    assert (
        [line for line in render(record, old.root).splitlines() if line.startswith(("native crash site", "  libtorch"))]
        == before
        != []
    )


def test_a_zip_that_is_not_one_is_one_error_line(tmp_path, capsys):
    store = _store(tmp_path / "m")
    pack_store(store.root)
    bad = store.root / "artefacts" / (safe_name("m/w:raw@-/0") + ".zip")
    bad.write_bytes(b"not a zip")
    with pytest.raises(StoreError, match="cannot be read"):
        store.artefacts_of(store.load()[0])
    assert main(["show", "m/w:raw@-/0", "--store", str(store.root)]) == 2
    assert capsys.readouterr().err.startswith(f"error: packed artefacts {bad} cannot be read")


def test_a_copied_store_can_still_be_packed_after_its_folders_moved(tmp_path):
    """Packing is per store: a store copied elsewhere (merge's source, a device's copy) packs in
    place without the original."""
    store = _store(tmp_path / "m")
    copy = tmp_path / "copy"
    shutil.copytree(store.root, copy)
    (done,) = pack_store(copy)
    assert done.folders == 3 and (store.root / "artefacts" / safe_name("m/w:raw@-/0")).is_dir()


def test_the_trainers_run_folder_is_neither_packed_nor_removed(tmp_path):
    store = _store(tmp_path / "m")
    folder = store.root / "artefacts" / safe_name("m/w:raw@-/0")
    (folder / "run").mkdir()
    (folder / "run" / "ckpt.pt").write_bytes(b"weights")
    before = _readings(store)
    (done,) = pack_store(store.root)
    assert done.files == 8  # the run/ file is not among them
    with zipfile.ZipFile(folder.with_name(folder.name + ".zip")) as zf:
        assert not [n for n in zf.namelist() if n.startswith("run/")]
    assert [p.name for p in folder.iterdir()] == ["run"] and (folder / "run" / "ckpt.pt").read_bytes() == b"weights"
    assert _readings(store) == before
    (again,) = pack_store(store.root)  # a folder holding only run/ is packed already
    assert again.folders == 0 and (folder / "run" / "ckpt.pt").is_file()
    retire(store.root, ["w:raw@-"], "the workload changed")
    moved = retired_store(store.root).root / "artefacts" / folder.name
    assert (moved / "run" / "ckpt.pt").is_file() and moved.with_name(folder.name + ".zip").is_file()
    assert not folder.exists()


def test_a_cell_retired_twice_keeps_both_packed_runs(tmp_path):
    store = _store(tmp_path / "m")
    pack_store(store.root)
    retire(store.root, ["w:raw@-"], "first change")
    _store(tmp_path / "m", hour=11)  # the cell runs again under the same ids
    pack_store(store.root)
    retire(store.root, ["w:raw@-"], "second change")
    old = retired_store(store.root)
    name = safe_name("m/w:raw@-/0")
    assert sorted(p.name for p in (old.root / "artefacts").iterdir() if p.name.startswith(name)) == sorted(
        [name + ".zip", name + "-retired2.zip"]
    )
    assert len({(old.artefacts_of(r) / "spec.json").read_text() for r in old.load()}) == 3
    assert sorted(Path(r.artefacts).name for r in old.load() if r.trial_id == "m/w:raw@-/0") == [
        name,
        name + "-retired2",
    ]


def test_merge_into_a_store_with_a_stray_zip_of_the_same_name_reads_the_merged_trial(tmp_path):
    src, dest = _store(tmp_path / "src"), Store(tmp_path / "dest")
    stray = dest.root / "artefacts" / (safe_name("m/w:raw@-/0") + ".zip")
    stray.parent.mkdir(parents=True)
    with zipfile.ZipFile(stray, "w") as zf:  # no record names it: a leftover
        zf.writestr("output.txt", "stale\n")
    merge(src.root, dest.root)
    assert not stray.exists()
    assert (dest.artefacts_of(dest.load()[0]) / "output.txt").read_text() == (
        TRACEBACKS / "gpu_f1_backward" / "1.txt"
    ).read_text()


def test_a_damaged_member_is_one_error_line_naming_the_zip(tmp_path, capsys):
    store = _store(tmp_path / "m")
    pack_store(store.root)
    packed = store.root / "artefacts" / (safe_name("m/w:raw@-/0") + ".zip")
    with zipfile.ZipFile(packed) as zf:
        info = zf.getinfo("output.txt")
    data = bytearray(packed.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + 10  # inside the member's compressed data
    data[at] ^= 0xFF
    packed.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="packed artefacts .*output.txt"):
        (store.artefacts_of(store.load()[0]) / "output.txt").read_text()
    assert main(["show", "m/w:raw@-/0", "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: packed artefacts {packed}") and err.count("\n") == 1


def test_the_committed_stores_are_packed():
    """Every committed trial under results/ is a zip: an H200 run ships the checkout whole, under
    64 MiB, and unpacked folders had outgrown it (2026-12-01). After filling a store here, run
    `python -m harness pack` before committing. Tracked files only: an H200 run's own pytest
    phase runs beside the folders its matrix phase has just written."""
    import re
    import subprocess

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(["git", "ls-files", "-z", "results"], cwd=root, capture_output=True)
    if proc.returncode != 0 or not proc.stdout:
        pytest.skip("not a git checkout with results/")
    inside = re.compile(r"^(results/.+?/artefacts/[^/]+)/(?!run/)")
    unpacked = sorted(
        {m.group(1) for f in proc.stdout.decode().split("\0") if (m := inside.match(f)) and (root / f).is_file()}
    )
    assert not unpacked, f"{len(unpacked)} unpacked trial folder(s), e.g. {unpacked[0]}: python -m harness pack"
