"""The result store survives torn writes and concurrent appends, and refuses what is not ours."""

from __future__ import annotations

import json
import threading

import pytest

from harness.stores.store import Store, StoreError, safe_name
from harness.trial.outcome import Outcome, TrialResult


def _result(i: int, outcome: Outcome = Outcome.OK) -> TrialResult:
    return TrialResult(
        trial_id=f"cell-a/{i}",
        cell="cell-a",
        trial_index=i,
        outcome=outcome,
        duration_s=1.5,
        final={"event": "final", "tokens_per_s": 10.0 + i},
    )


def test_append_then_load_round_trips_in_order(tmp_path):
    store = Store(tmp_path / "s")
    results = [_result(i, Outcome.HANG if i % 2 else Outcome.OK) for i in range(5)]
    for r in results:
        store.append(r)
    assert store.load() == results
    assert store.done_ids() == {f"cell-a/{i}" for i in range(5)}
    lines = (tmp_path / "s" / "trials.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])


def test_missing_store_is_empty(tmp_path):
    assert Store(tmp_path / "nothing").load() == []


def test_torn_final_line_is_ignored_then_cut_before_the_next_append(tmp_path):
    store = Store(tmp_path)
    store.append(_result(0))
    store.append(_result(1))
    path = tmp_path / "trials.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # harness killed in the middle of a write
    assert [r.trial_id for r in store.load()] == ["cell-a/0"]
    assert store.done_ids() == {"cell-a/0"}  # trial 1 reruns
    Store(tmp_path).append(_result(2))
    assert [r.trial_id for r in Store(tmp_path).load()] == ["cell-a/0", "cell-a/2"]


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"trial_id": "x"\n{"a": 1}\n', "line 1: not a JSON record"),
        (b"garbage\n" + b"x" * 10 + b"\n", "line 1: not a JSON record"),
        (b"[1, 2]\n", "line 1: expected a JSON object, got list"),
        (b'{"trial_id": "x", "cell": "c"}\n', "line 1: not a trial record (KeyError"),
        (
            b'{"trial_id": "x", "cell": "c", "trial_index": 0, "outcome": "exploded"}\n',
            "line 1: not a trial record (ValueError",
        ),
    ],
)
def test_unreadable_store_raises_one_line_and_is_left_untouched(tmp_path, content, message):
    path = tmp_path / "trials.jsonl"
    good = json.dumps(_result(0).to_json()).encode() + b"\n"
    path.write_bytes(content + good)
    with pytest.raises(StoreError) as info:
        Store(tmp_path).load()
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(StoreError):
        Store(tmp_path).append(_result(1))
    assert path.read_bytes() == content + good


def test_store_root_that_is_a_file_is_refused(tmp_path):
    root = tmp_path / "file"
    root.write_text("x")
    with pytest.raises(StoreError, match="is not a directory$"):
        Store(root)


def test_concurrent_appends_never_interleave(tmp_path):
    store = Store(tmp_path)
    errors: list[BaseException] = []

    def writer(base: int) -> None:
        try:
            for i in range(50):
                store.append(_result(base + i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k * 1000,), name=f"store-writer-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert not errors
    assert len(store.done_ids()) == 200


def test_artefacts_dirs_are_safe_and_distinct(tmp_path):
    store = Store(tmp_path)
    a, b = store.artefacts_dir("cell/a b"), store.artefacts_dir("cell_a_b")
    assert a != b and a.is_dir() and b.is_dir()
    assert a.parent == tmp_path / "artefacts" and "/" not in a.name
    assert safe_name("plain-id_1.2") == "plain-id_1.2"
    assert safe_name("../..") != safe_name("..")
    assert not safe_name("../..").startswith(".")


def test_a_record_names_its_matrix_and_keeps_it_out_of_its_json():
    r = TrialResult(
        trial_id="gpu-topology-4/launch-bound:raw@-/3", cell="launch-bound:raw@-", trial_index=3, outcome=Outcome.OK
    )
    assert r.matrix == "gpu-topology-4"
    assert "matrix" not in r.to_json()
