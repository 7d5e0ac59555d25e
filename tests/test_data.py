"""open_dataset over real files (save_to_disk, Arrow IPC file/stream, Parquet), its errors, collate."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dflash.batch import HiddenBatch, TokenBatch
from dflash.buckets import Batch
from dflash.collate import collate
from dflash.data import _values, open_dataset, split_for_training, validate_vocab, write_token_file
from dflash.trainer_errors import DataError
from tests.datautil import arrow_files, make_rows, write_save_to_disk
from tests.test_pipeline_errors import REPO

ROWS = make_rows(50, seed=1)


def _assert_same_rows(ds, rows) -> None:
    assert len(ds) == len(rows)
    assert ds.lengths.tolist() == [len(r[0]) for r in rows]
    for i, (ids, mask) in enumerate(rows):
        got_ids, got_mask = ds.row(i)
        assert got_ids.dtype == np.int64 and got_mask.dtype == np.int64
        assert got_ids.tolist() == ids and got_mask.tolist() == mask


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    return write_save_to_disk(str(tmp_path_factory.mktemp("ds") / "train"), ROWS, num_shards=3)


def test_save_to_disk_folder_reads_back_every_row(saved: str) -> None:
    assert len(arrow_files(saved)) == 3
    ds = open_dataset(saved)
    _assert_same_rows(ds, ROWS)
    assert ds.max_token_id() == max(max(r[0]) for r in ROWS)
    assert ds.loss_counts().tolist() == [sum(r[1]) for r in ROWS]


def test_arrow_file_and_stream_formats_read_the_same(tmp_path) -> None:
    file_path = str(tmp_path / "f.arrow")
    assert write_token_file(file_path, iter(ROWS)) == len(ROWS)
    table = pa.ipc.open_file(file_path).read_all()
    stream_path = str(tmp_path / "s.arrow")
    with pa.OSFile(stream_path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=7):
            writer.write_batch(batch)
    _assert_same_rows(open_dataset(file_path), ROWS)
    _assert_same_rows(open_dataset(stream_path), ROWS)


def test_parquet_reads_rows_across_row_groups_in_any_order(tmp_path) -> None:
    path = str(tmp_path / "d.parquet")
    table = pa.table({"input_ids": [r[0] for r in ROWS], "loss_mask": [r[1] for r in ROWS]})
    pq.write_table(table, path, row_group_size=4)
    ds = open_dataset(path)
    assert pq.ParquetFile(path).num_row_groups == 13
    order = np.random.default_rng(0).permutation(len(ROWS))
    for i in order:  # random access evicts and re-decodes row groups
        assert ds.row(int(i))[0].tolist() == ROWS[i][0]
    _assert_same_rows(ds, ROWS)
    assert ds.loss_counts().tolist() == [sum(r[1]) for r in ROWS]


def test_parquet_rows_read_concurrently_match(tmp_path) -> None:
    path = str(tmp_path / "d.parquet")
    pq.write_table(
        pa.table({"input_ids": [r[0] for r in ROWS], "loss_mask": [r[1] for r in ROWS]}), path, row_group_size=3
    )
    ds = open_dataset(path)
    errors: list[BaseException] = []

    def read(k: int) -> None:
        try:
            for i in np.random.default_rng(k).permutation(len(ROWS)):
                assert ds.row(int(i))[0].tolist() == ROWS[i][0]
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(k,), name=f"test-reader-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert not errors, errors


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
@pytest.mark.parametrize("ids_type, mask_type", [(pa.int32(), pa.int8()), (pa.int64(), pa.uint8())])
def test_every_integer_width_reads_back(tmp_path, list_type, ids_type, mask_type) -> None:
    path = str(tmp_path / "w.arrow")
    ids = pa.array([r[0] for r in ROWS], list_type(ids_type))
    table = pa.table({"input_ids": ids, "loss_mask": pa.array([r[1] for r in ROWS], list_type(mask_type))})
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=9)
    _assert_same_rows(open_dataset(path), ROWS)


def test_a_sliced_arrays_values_start_at_its_offset() -> None:
    lists = pa.array([r[0] for r in ROWS], pa.list_(pa.int32())).slice(7, 20)
    parts = [lists.offsets, lists.offsets.slice(3), lists.values.slice(5, 10), lists.offsets.slice(0, 0)]
    assert max(p.offset for p in parts) > 0
    for part in parts:
        assert _values(part).tolist() == part.to_pylist()


def test_reading_a_corpus_does_not_import_pandas(tmp_path) -> None:
    # pyarrow's to_numpy imports pandas: a quarter of a second of every run's start, for nothing
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"input_ids": [r[0] for r in ROWS], "loss_mask": [r[1] for r in ROWS]}), path)
    code = (
        f"import sys; from dflash.data import open_dataset; ds = open_dataset({path!r}); "
        "print(len(ds), ds.row(3)[0].tolist(), 'pandas' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[0] == str(len(ROWS)) and out.stdout.rstrip().endswith("False"), out.stdout


def test_missing_path_is_one_line_data_error(tmp_path) -> None:
    with pytest.raises(DataError, match="no such file") as info:
        open_dataset(str(tmp_path / "nope"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.1, 0.5, 0.9, 0.999])
def test_truncated_stream_shard_is_data_error(saved: str, tmp_path, fraction: float) -> None:
    data = open(arrow_files(saved)[0], "rb").read()
    cut = str(tmp_path / "cut.arrow")
    with open(cut, "wb") as fh:
        fh.write(data[: int(len(data) * fraction)])
    with pytest.raises(DataError, match="cut.arrow") as info:
        open_dataset(cut)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("drop", [1, 6, 10, 200, 1000])
def test_truncated_arrow_file_format_is_data_error(tmp_path, drop: int) -> None:
    path = str(tmp_path / "f.arrow")
    write_token_file(path, iter(ROWS))
    data = open(path, "rb").read()
    with open(path, "wb") as fh:
        fh.write(data[:-drop])
    with pytest.raises(DataError, match="f.arrow"):
        open_dataset(path)


def test_stream_cut_at_a_message_boundary_is_not_silently_short(tmp_path) -> None:
    table = pa.table({"input_ids": [r[0] for r in ROWS], "loss_mask": [r[1] for r in ROWS]})
    path = str(tmp_path / "s.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_batch(table.to_batches()[0])
    data = open(path, "rb").read()
    with open(path, "wb") as fh:
        fh.write(data[:-8])  # drop only the end-of-stream marker: pyarrow alone reads this fine
    assert pa.ipc.open_stream(path).read_all().num_rows == len(ROWS)
    with pytest.raises(DataError, match="end-of-stream"):
        open_dataset(path)


def test_flipped_bytes_give_data_error_or_consistent_rows(saved: str, tmp_path) -> None:
    data = bytearray(open(arrow_files(saved)[1], "rb").read())
    path = str(tmp_path / "flip.arrow")
    outcomes = {"error": 0, "ok": 0}
    # Dense over the schema/batch metadata at the head, sparse over the body (keeps this ~2 s).
    for pos in [*range(0, 1024, 2), *range(1024, len(data), 37)]:
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        with open(path, "wb") as fh:
            fh.write(flipped)
        try:
            ds = open_dataset(path)
        except DataError as exc:
            assert "flip.arrow" in str(exc) and "\n" not in str(exc)
            outcomes["error"] += 1
            continue
        for i in range(len(ds)):  # a dataset that opened must be fully readable and consistent
            ids, mask = ds.row(i)
            assert ids.shape == mask.shape == (ds.lengths[i],)
        outcomes["ok"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0, outcomes


def test_missing_column_is_named(tmp_path) -> None:
    import datasets

    folder = str(tmp_path / "d")
    datasets.Dataset.from_dict({"input_ids": [[1, 2]], "labels": [[1, 2]]}).save_to_disk(folder)
    with pytest.raises(DataError, match="missing column.*loss_mask"):
        open_dataset(folder)


def test_non_integer_column_is_rejected(tmp_path) -> None:
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"input_ids": [["a", "b"]], "loss_mask": [[0, 1]]}), path)
    with pytest.raises(DataError, match="input_ids must be a list of integers"):
        open_dataset(path)


def test_null_rows_are_rejected(tmp_path) -> None:
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"input_ids": [[1, 2], None], "loss_mask": [[0, 1], [1]]}), path)
    with pytest.raises(DataError, match="nulls"):
        open_dataset(path)


def test_length_mismatch_names_the_row(tmp_path) -> None:
    rows = make_rows(5, seed=2)
    bad = {"input_ids": [r[0] for r in rows], "loss_mask": [r[1] for r in rows]}
    bad["loss_mask"][3] = bad["loss_mask"][3][:-1]
    import datasets

    folder = str(tmp_path / "d")
    datasets.Dataset.from_dict(bad).save_to_disk(folder)
    with pytest.raises(DataError, match="row 3: input_ids has"):
        open_dataset(folder)


def test_empty_dataset_is_rejected(tmp_path) -> None:
    path = str(tmp_path / "e.arrow")
    write_token_file(path, iter([]))
    with pytest.raises(DataError, match="empty"):
        open_dataset(path)


def test_folder_without_state_json_and_dataset_dict(tmp_path) -> None:
    with pytest.raises(DataError, match="no state.json"):
        open_dataset(str(tmp_path))
    (tmp_path / "dataset_dict.json").write_text("{}")
    with pytest.raises(DataError, match="DatasetDict"):
        open_dataset(str(tmp_path))


def test_validate_vocab_reports_the_mismatch(saved: str) -> None:
    ds = open_dataset(saved)
    top = ds.max_token_id()
    validate_vocab(ds, top + 1)
    with pytest.raises(
        DataError, match=f"vocabulary mismatch between data and target: max id {top} >= target vocab {top}"
    ):
        validate_vocab(ds, top)


def test_write_token_file_leaves_nothing_when_rows_fail(tmp_path) -> None:
    def rows():
        yield [1, 2], [0, 1]
        raise DataError("line 2: bad")

    path = tmp_path / "out.arrow"
    with pytest.raises(DataError):
        write_token_file(str(path), rows())
    assert os.listdir(tmp_path) == []


def test_split_for_training_drops_short_and_holds_out(saved: str) -> None:
    ds = open_dataset(saved)
    train, held = split_for_training(ds, min_loss_tokens=10, heldout_samples=5, seed=3)
    counts = ds.loss_counts()
    assert len(held) == 5 and len(train) + 5 == int((counts >= 10).sum())
    assert (train.loss_counts() >= 10).all() and (held.loss_counts() >= 10).all()
    train_rows = {tuple(train.row(i)[0].tolist()) for i in range(len(train))}
    assert not train_rows & {tuple(held.row(i)[0].tolist()) for i in range(len(held))}
    with pytest.raises(DataError, match="supervised tokens"):
        split_for_training(ds, min_loss_tokens=10_000, heldout_samples=1, seed=0)


def test_collate_right_pads_and_masks_padding(saved: str) -> None:
    ds = open_dataset(saved)
    batch = Batch(bucket=128, indices=(4, 0, 7))
    tb = collate(ds, batch, seq=11, epoch=2)
    assert (tb.seq, tb.epoch, tb.bucket, tb.indices) == (11, 2, 128, (4, 0, 7))
    assert tb.input_ids.shape == tb.loss_mask.shape == (3, 128) and tb.input_ids.dtype == torch.int64
    for r, i in enumerate(batch.indices):
        n = len(ROWS[i][0])
        assert tb.lengths[r] == n
        assert tb.input_ids[r, :n].tolist() == ROWS[i][0] and tb.loss_mask[r, :n].tolist() == ROWS[i][1]
        assert not tb.input_ids[r, n:].any() and not tb.loss_mask[r, n:].any()
    assert tb.num_tokens == sum(len(ROWS[i][0]) for i in batch.indices)


def test_collate_fixed_shape_padding_for_persistent_buffers(saved: str) -> None:
    ds = open_dataset(saved)
    tb = collate(ds, Batch(bucket=128, indices=(1, 2)), seq=0, epoch=0, pad_to=160, pad_rows=5)
    assert tb.input_ids.shape == (5, 160) and tb.lengths.tolist()[2:] == [0, 0, 0]
    assert not tb.loss_mask[2:].any() and not tb.input_ids[2:].any()
    with pytest.raises(ValueError, match="pad_to"):
        collate(ds, Batch(bucket=128, indices=(1,)), seq=0, epoch=0, pad_to=64)
    with pytest.raises(ValueError, match="pad_rows"):
        collate(ds, Batch(bucket=128, indices=(1, 2)), seq=0, epoch=0, pad_rows=1)


def test_collated_tensors_are_owned_and_to_returns_new_objects(saved: str) -> None:
    ds = open_dataset(saved)
    tb = collate(ds, Batch(bucket=128, indices=(0,)), seq=0, epoch=0)
    tb.input_ids.fill_(7)
    assert ds.row(0)[0].tolist() == ROWS[0][0]  # the memory-mapped dataset is untouched
    moved = tb.to("cpu")
    assert isinstance(moved, TokenBatch) and moved is not tb and moved.indices == tb.indices
    hb = HiddenBatch(tokens=tb, context=torch.zeros(1, 128, 8)).to("cpu")
    assert hb.tokens.seq == 0 and hb.context.shape == (1, 128, 8)
