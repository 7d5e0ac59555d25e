"""Packed documents from the data to the objective: the `doc_ids` column, collate, the prefetch
channel, the target forward (no attention across documents) and a short training run.

The objective's side (mask, labels) is tests/test_doc_ids.py; here the ids come from a dataset.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dflash.batch import HiddenBatch
from dflash.buckets import Batch
from dflash.channel import Channel, ChannelClosed
from dflash.collate import collate
from dflash.config import CompileConfig, DataConfig, DrafterConfig, TargetConfig
from dflash.data import DOC_IDS, open_dataset, pack_documents, write_token_file
from dflash.metrics import Metrics
from dflash.prefetch import BatchPrefetcher, EpochPlanner
from dflash.prepare import prepare_jsonl
from dflash.step import make_inputs
from dflash.synthetic import ensure_synthetic_corpus
from dflash.target import build_target, document_inputs
from dflash.target_loop import TargetForwardLoop
from dflash.train import train
from dflash.trainer_errors import DataError
from harness.runtime.errors import ConfigError
from harness.runtime.fixes import FixSet
from tests.datautil import affine_generate, build_tokenizer, make_rows
from tests.test_doc_ids import BS, obj, target  # noqa: F401  (module fixtures: the objective under test)
from tests.test_pipeline_errors import REPO, small_config

LAYERS = (0, 2, 3)  # 3 is the last layer: HF returns it final-normed


def _docs(n: int, seed: int, max_len: int = 20) -> list[tuple[list[int], list[int]]]:
    return make_rows(n, seed, min_len=4, max_len=max_len)


def _packed_file(tmp_path, docs, pack_len: int) -> str:
    path = str(tmp_path / "packed.arrow")
    write_token_file(path, pack_documents(iter(docs), pack_len), doc_ids=True)
    return path


def test_pack_documents_fills_rows_in_order_and_numbers_documents_per_row():
    docs = [([1] * 5, [0] * 5), ([2] * 4, [1] * 4), ([3] * 3, [1] * 3), ([4] * 8, [1] * 8)]
    rows = list(pack_documents(iter(docs), 12))
    assert [r[0] for r in rows] == [[1] * 5 + [2] * 4 + [3] * 3, [4] * 8]
    assert [r[2] for r in rows] == [[0] * 5 + [1] * 4 + [2] * 3, [0] * 8]
    assert rows[0][1] == [0] * 5 + [1] * 7
    with pytest.raises(ValueError, match="more than the packed row length"):
        list(pack_documents(iter(docs), 7))


def test_a_packed_dataset_round_trips_doc_ids_into_the_token_batch(tmp_path):
    docs = _docs(40, seed=1)
    ds = open_dataset(_packed_file(tmp_path, docs, 48))
    assert ds.has_doc_ids and len(ds) < len(docs)
    # Concatenated in order, the rows give back the documents; each row numbers its own.
    flat = [t for i in range(len(ds)) for t in ds.row(i)[0].tolist()]
    assert flat == [t for d in docs for t in d[0]]
    for i in range(len(ds)):
        ids, _ = ds.row(i)
        doc = ds.doc_ids(i)
        assert doc.dtype == np.int64 and doc.shape == ids.shape and len(ids) <= 48
        assert doc[0] == 0 and (np.diff(doc) >= 0).all() and (np.diff(doc) <= 1).all()
    rows = (2, 0, 5)
    tb = collate(ds, Batch(bucket=48, indices=rows), seq=7, epoch=0, pad_rows=4)
    assert tb.doc_ids is not None and tb.doc_ids.shape == tb.input_ids.shape == (4, 48)
    for r, i in enumerate(rows):
        n = len(ds.row(i)[0])
        assert tb.doc_ids[r, :n].tolist() == ds.doc_ids(i).tolist()
        assert (tb.doc_ids[r, n:] == -1).all()  # padding belongs to no document
    assert (tb.doc_ids[3] == -1).all()
    assert tb.to("cpu").doc_ids.tolist() == tb.doc_ids.tolist()
    # A view keeps the column (training reads rows through split_for_training's views).
    view = ds.select([5, 2])
    assert view.has_doc_ids and view.doc_ids(1).tolist() == ds.doc_ids(2).tolist()


def test_a_dataset_without_the_column_gives_no_doc_ids(tmp_path):
    path = str(tmp_path / "plain.arrow")
    write_token_file(path, iter(_docs(10, seed=2)))
    ds = open_dataset(path)
    assert not ds.has_doc_ids and ds.doc_ids(0) is None
    assert collate(ds, Batch(bucket=32, indices=(0, 1)), seq=0, epoch=0).doc_ids is None


def test_save_to_disk_and_parquet_carry_the_column(tmp_path):
    import datasets

    packed = list(pack_documents(iter(_docs(30, seed=3)), 40))
    cols = {"input_ids": [r[0] for r in packed], "loss_mask": [r[1] for r in packed], DOC_IDS: [r[2] for r in packed]}
    folder = str(tmp_path / "saved")
    datasets.Dataset.from_dict(cols).save_to_disk(folder, num_shards=2)
    parquet = str(tmp_path / "packed.parquet")
    pq.write_table(pa.table(cols), parquet, row_group_size=4)
    for path in (folder, parquet):
        ds = open_dataset(path)
        assert ds.has_doc_ids and len(ds) == len(packed)
        assert [ds.doc_ids(i).tolist() for i in range(len(ds))] == cols[DOC_IDS]


def _ipc(path: str, cols: dict) -> str:
    table = pa.table(cols)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def test_a_doc_ids_column_of_the_wrong_length_is_one_data_error_at_open(tmp_path):
    bad = _ipc(
        str(tmp_path / "bad.arrow"),
        {"input_ids": [[1, 2, 3], [4, 5]], "loss_mask": [[0, 1, 1], [0, 1]], DOC_IDS: [[0, 0, 1], [0, 0, 0]]},
    )
    with pytest.raises(DataError, match=r"bad.arrow: row 1: input_ids has 2 tokens but doc_ids has 3$"):
        open_dataset(bad)
    text = _ipc(str(tmp_path / "text.arrow"), {"input_ids": [[1, 2]], "loss_mask": [[0, 1]], DOC_IDS: [["a", "b"]]})
    with pytest.raises(DataError, match="column doc_ids must be a list of integers"):
        open_dataset(text)
    nulls = _ipc(str(tmp_path / "nulls.arrow"), {"input_ids": [[1, 2]], "loss_mask": [[0, 1]], DOC_IDS: [[0, None]]})
    with pytest.raises(DataError, match="column doc_ids contains nulls"):
        open_dataset(nulls)
    # And through the trainer: exit 2 with that one line, nothing written.
    cfg = small_config(tmp_path / "run")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=bad))
    with pytest.raises(DataError, match="doc_ids has 3"):
        train(cfg)
    assert not os.path.exists(tmp_path / "run")


def test_shards_that_disagree_on_the_column_are_a_data_error(tmp_path):
    import datasets

    folder = str(tmp_path / "mixed")
    datasets.Dataset.from_dict({"input_ids": [[1, 2]] * 4, "loss_mask": [[0, 1]] * 4}).save_to_disk(folder)
    state_path = os.path.join(folder, "state.json")
    with open(state_path, encoding="utf-8") as fh:
        state = json.load(fh)
    extra = os.path.join(folder, "data-extra.arrow")
    table = pa.table({"input_ids": [[1, 2]], "loss_mask": [[0, 1]], DOC_IDS: [[0, 0]]})
    with pa.OSFile(extra, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    state["_data_files"].append({"filename": "data-extra.arrow"})
    with open(state_path, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    with pytest.raises(DataError, match="have a doc_ids column and others do not"):
        open_dataset(folder)


def test_the_prefetcher_carries_doc_ids_through_its_channel(tmp_path):
    ds = open_dataset(_packed_file(tmp_path, _docs(60, seed=4, max_len=30), 64))
    cfg = DataConfig(bucket_boundaries=(32, 64), token_budget=256)
    planner = EpochPlanner(ds.lengths, cfg)
    stop = threading.Event()
    out = Channel("tokens", 64, stop, 0.01)
    metrics = Metrics(stage_threads={"prefetch": 1}, log_interval_s=1000.0, total_steps=1)
    gate = type("Open", (), {"wait": lambda self: None})()
    BatchPrefetcher(
        ds=ds, planner=planner, out=out, num_threads=1, start_seq=0, end_seq=5, gate=gate, metrics=metrics
    ).run(0)
    got = []
    while True:
        try:
            got.append(out.get())
        except ChannelClosed:
            break
    metrics.close()
    assert len(got) == 5
    for tb in got:
        assert tb.doc_ids is not None and tb.doc_ids.shape == tb.input_ids.shape
        for r, i in enumerate(tb.indices):
            assert tb.doc_ids[r, : len(ds.row(i)[0])].tolist() == ds.doc_ids(i).tolist()


# -- the target forward ----------------------------------------------------------------------


def _three_documents(vocab: int):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, vocab - 1, (n,), generator=g) for n in (9, 14, 7)]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("hooked", [False, True])
def test_each_document_of_a_packed_row_gets_the_states_it_gets_alone(arch, hooked):
    tgt = build_target(TargetConfig(arch=arch), "cpu")
    fwd = tgt.hidden_hooked if hooked else tgt.hidden
    docs = _three_documents(tgt.vocab_size)
    ids = torch.cat(docs)[None]
    doc_ids = torch.cat([torch.full((len(d),), k) for k, d in enumerate(docs)])[None]
    mask, positions = document_inputs(doc_ids)
    assert positions.tolist() == [[p for d in docs for p in range(len(d))]]
    packed = fwd(ids, mask, LAYERS, positions)
    plain = fwd(ids, None, LAYERS)
    start = 0
    for d in docs:
        alone = fwd(d[None], None, LAYERS)
        rows = slice(start, start + len(d))
        torch.testing.assert_close(packed[0, rows], alone[0], rtol=1e-5, atol=1e-5)
        if start:  # without the mask, later documents see the earlier ones
            assert not torch.allclose(plain[0, rows], alone[0], rtol=1e-3, atol=1e-3)
        start += len(d)


def test_the_target_loop_isolates_documents_and_the_objective_receives_them(tmp_path, target, obj):  # noqa: F811
    """Dataset -> collate -> TargetForwardLoop.forward -> make_inputs -> the drafter mask."""
    docs = [(d.tolist(), [0] * 2 + [1] * (len(d) - 2)) for d in _three_documents(target.vocab_size)]
    ds = open_dataset(_packed_file(tmp_path, docs, 32))
    tb = collate(ds, Batch(bucket=32, indices=(0,)), seq=3, epoch=0, pad_rows=2)
    n = int(tb.lengths[0])
    loop = TargetForwardLoop(
        targets={torch.device("cpu"): target},
        devices=(torch.device("cpu"),),
        layer_ids=obj.layer_ids,
        inp=None,
        out=None,
        ccfg=CompileConfig(),
        fs=FixSet.from_names(()),
        metrics=None,
    )
    hb = loop.forward(0, loop._forward_fn(target), tb)
    assert isinstance(hb, HiddenBatch) and hb.tokens.doc_ids is tb.doc_ids
    start = 0
    for d, _ in docs:
        alone = target.hidden(torch.tensor([d]), None, obj.layer_ids)
        torch.testing.assert_close(hb.context[0, start : start + len(d)], alone[0], rtol=1e-5, atol=1e-5)
        start += len(d)
    assert start == n
    inputs = make_inputs(
        hb, DrafterConfig(block_size=BS, num_anchors=8), seed=0, device=torch.device("cpu"), dtype=torch.float32
    )
    assert torch.equal(inputs.doc_ids, tb.doc_ids) and len(inputs.as_args()) == 6
    allowed = obj._masks(inputs.anchors[:1], inputs.keep[:1], 32, inputs.doc_ids[:1], flex=False).allowed[0, 0]
    q_doc = tb.doc_ids[0, inputs.anchors[0]].repeat_interleave(BS)
    kept = inputs.keep[0].repeat_interleave(BS)
    assert kept.any() and len(set(q_doc[kept].tolist())) > 1  # anchors in several documents
    assert not (allowed[:, :32] & (q_doc[:, None] != tb.doc_ids[0][None, :])).any()
    with torch.no_grad():
        assert torch.isfinite(obj(*inputs.as_args()).loss)


# -- producing packed data --------------------------------------------------------------------


def test_prepare_pack_docs_writes_packed_rows(tmp_path):
    tok = build_tokenizer(str(tmp_path / "tok"))
    lines = [
        {"prompt": "the cat", "completion": "sat on a mat"},
        {"prompt": "hello", "completion": "world"},
        {"prompt": "red blue", "completion": "green"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    plain = prepare_jsonl(str(src), tok, str(tmp_path / "plain.arrow"), max_len=12)
    stats = prepare_jsonl(str(src), tok, str(tmp_path / "packed.arrow"), max_len=12, pack_docs=True)
    assert (plain.written, plain.rows) == (3, 3) and (stats.written, stats.rows) == (3, 2)
    one, packed = open_dataset(str(tmp_path / "plain.arrow")), open_dataset(str(tmp_path / "packed.arrow"))
    assert not one.has_doc_ids and packed.has_doc_ids
    ids, mask = packed.row(0)
    assert ids.tolist() == one.row(0)[0].tolist() + one.row(1)[0].tolist()
    assert mask.tolist() == one.row(0)[1].tolist() + one.row(1)[1].tolist()
    assert packed.doc_ids(0).tolist() == [0] * len(one.row(0)[0]) + [1] * len(one.row(1)[0])
    assert packed.row(1)[0].tolist() == one.row(2)[0].tolist() and packed.doc_ids(1).tolist() == [0] * 4


def test_the_synthetic_corpus_packs_its_samples_without_generating_again(tmp_path):
    calls = []

    def generate(prompts, max_new):
        calls.append(len(prompts))
        return affine_generate(prompts, max_new)

    cfg = DataConfig(cache_dir=str(tmp_path), synthetic_samples=60)
    plain = open_dataset(ensure_synthetic_corpus(cfg, generate, 256, "k"))
    made = len(calls)
    packed_cfg = dataclasses.replace(cfg, synthetic_pack_len=128)
    packed = open_dataset(ensure_synthetic_corpus(packed_cfg, generate, 256, "k"))
    assert len(calls) == made  # the plain corpus was reused, the target not run again
    assert packed.has_doc_ids and not plain.has_doc_ids and len(packed) < len(plain)
    assert (packed.lengths <= 128).all()
    assert (
        np.concatenate([packed.row(i)[0] for i in range(len(packed))]).tolist()
        == np.concatenate([plain.row(i)[0] for i in range(len(plain))]).tolist()
    )
    assert sum(int(packed.doc_ids(i).max()) + 1 for i in range(len(packed))) == len(plain)
    assert ensure_synthetic_corpus(cfg, generate, 256, "k") == plain.path  # default: same file as before


def test_pack_len_must_hold_a_sample_and_fit_the_largest_bucket():
    DataConfig(synthetic_pack_len=128)
    for bad in (100, 256):
        with pytest.raises(ConfigError, match="data.synthetic_pack_len"):
            DataConfig(synthetic_pack_len=bad)


# -- training on packed data ------------------------------------------------------------------


def test_a_small_run_trains_on_packed_rows_with_warmup_and_persistent_buffers(tmp_path):
    cfg = small_config(tmp_path / "run")
    cfg = dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, synthetic_pack_len=48),
        fixes=("thread-local-warmup", "persistent-buffers"),
    )
    outcome = train(cfg)
    assert outcome.exit_code == 0, outcome.pipeline.report()
    assert outcome.final["steps"] == 4 and math.isfinite(outcome.final["loss_last"])


@pytest.mark.slow
def test_the_trainer_command_finishes_on_a_packed_synthetic_corpus(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("HARNESS_FAULTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dflash",
            "train",
            "--preset",
            "tiny-cpu",
            "--set",
            "data.synthetic_pack_len=128",
            "--steps",
            "4",
            "--out",
            str(tmp_path / "run"),
        ],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    assert final["event"] == "final" and final["steps"] == 4
    assert math.isfinite(final["loss_first"]) and math.isfinite(final["loss_last"])
