"""EpochPlanner under batching=token-budget: the global seq walks the epochs' plans, each epoch
holds every sample once in batches that follow the shuffle, and a one-shape run's row count
(`max_rows`, what persistent-buffers pads to) holds every batch."""

from __future__ import annotations

import numpy as np

from dflash.collate import collate
from dflash.config import DataConfig
from dflash.data import open_dataset, write_token_file
from dflash.prefetch import EpochPlanner


def _cfg(**kw) -> DataConfig:
    return DataConfig(
        bucket_boundaries=(32, 64, 128), token_budget=512, batching="token-budget", max_batch_rows=8, **kw
    )


def _lengths() -> np.ndarray:
    return np.random.default_rng(0).integers(1, 129, size=300)


def test_each_epoch_holds_every_sample_once_and_epochs_differ() -> None:
    lengths, cfg = _lengths(), _cfg()
    planner = EpochPlanner(lengths, cfg)
    epochs: dict[int, list] = {}
    seq = 0
    while True:  # the seqs of epochs 0, 1 and 2, up to the first of epoch 3
        epoch, batch = planner.get(seq)
        if epoch == 3:
            break
        epochs.setdefault(epoch, []).append(batch)
        seq += 1
    for batches in epochs.values():
        assert sorted(i for b in batches for i in b.indices) == list(range(lengths.size))
        assert all(sum(int(lengths[i]) for i in b.indices) <= cfg.token_budget for b in batches)
        assert all(1 <= len(b.indices) <= cfg.max_batch_rows for b in batches)
    # The shuffle moves the batch sizes from epoch to epoch.
    assert len({tuple(sorted(len(b.indices) for b in batches)) for batches in epochs.values()}) > 1


def test_max_rows_is_the_cap_under_token_budget_and_budget_over_bound_when_fixed() -> None:
    assert EpochPlanner(_lengths(), _cfg()).max_rows() == 8
    fixed = DataConfig(bucket_boundaries=(32, 64, 128), token_budget=512)
    assert EpochPlanner(_lengths(), fixed).max_rows() == 512 // 32


def test_one_shape_padding_holds_every_token_budget_batch(tmp_path) -> None:
    lengths = _lengths()
    rng = np.random.default_rng(1)
    path = str(tmp_path / "data.arrow")
    write_token_file(path, iter((rng.integers(1, 200, size=n).tolist(), [1] * n) for n in lengths.tolist()))
    ds, cfg = open_dataset(path), _cfg()
    planner = EpochPlanner(ds.lengths, cfg)
    total = 0
    for seq in range(60):
        epoch, batch = planner.get(seq)
        tb = collate(ds, batch, seq, epoch, pad_to=cfg.bucket_boundaries[-1], pad_rows=planner.max_rows())
        assert tuple(tb.input_ids.shape) == (8, 128)
        total += int(tb.lengths.sum())
    assert total > 0
