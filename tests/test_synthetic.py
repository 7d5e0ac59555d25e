"""The synthetic corpus: deterministic, cached, atomic, completions from the generator."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dflash.buckets import bucket_of
from dflash.config import DataConfig
from dflash.data import open_dataset, validate_vocab
from dflash.synthetic import GENERATE_BATCH, PROMPT_LEN_QUANTUM, ensure_synthetic_corpus
from tests.datautil import affine_generate

VOCAB = 256


class CountingGenerate:
    """affine_generate that records each call's batch size and max_new_tokens."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.prompt_lengths: list[set[int]] = []

    def __call__(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        self.calls.append((len(prompts), max_new_tokens))
        self.prompt_lengths.append({len(p) for p in prompts})
        return affine_generate(prompts, max_new_tokens, VOCAB)


def _cfg(tmp_path, **kw) -> DataConfig:
    return DataConfig(cache_dir=str(tmp_path / "cache"), synthetic_samples=200, **kw)


def test_corpus_rows_are_prompt_plus_generated_completion(tmp_path) -> None:
    cfg = _cfg(tmp_path)
    ds = open_dataset(ensure_synthetic_corpus(cfg, CountingGenerate(), VOCAB, "tiny-llama"))
    assert len(ds) == cfg.synthetic_samples
    validate_vocab(ds, VOCAB)
    for i in range(len(ds)):
        ids, mask = ds.row(i)
        assert cfg.synthetic_min_len <= len(ids) <= cfg.synthetic_max_len
        split = int(np.argmax(mask))  # loss_mask: 0 on the prompt, then 1 to the end
        assert split > 0 and mask[:split].sum() == 0 and mask[split:].all()
        prompt, completion = ids[:split].tolist(), ids[split:].tolist()
        assert all(1 <= t <= VOCAB - 2 for t in prompt)  # 0 = pad and VOCAB-1 = mask stay out
        assert completion == affine_generate([prompt], len(completion), VOCAB)[0]


def test_lengths_spread_over_several_buckets(tmp_path) -> None:
    cfg = _cfg(tmp_path)
    ds = open_dataset(ensure_synthetic_corpus(cfg, CountingGenerate(), VOCAB, "k"))
    used = np.bincount(bucket_of(ds.lengths, cfg.bucket_boundaries), minlength=len(cfg.bucket_boundaries))
    assert (used > 0).all(), used


def test_generate_is_called_in_batches(tmp_path) -> None:
    gen = CountingGenerate()
    ensure_synthetic_corpus(_cfg(tmp_path), gen, VOCAB, "k")
    assert sum(n for n, _ in gen.calls) == 200
    assert max(n for n, _ in gen.calls) <= GENERATE_BATCH
    # One prompt length per call (the target batches equal lengths only), and few calls: at most
    # one partial chunk per distinct prompt length on top of the full chunks.
    assert all(len(lengths) == 1 for lengths in gen.prompt_lengths)
    distinct = len(set().union(*gen.prompt_lengths))
    assert all(length % PROMPT_LEN_QUANTUM == 0 for length in set().union(*gen.prompt_lengths))
    assert len(gen.calls) <= distinct + 200 // GENERATE_BATCH


def test_same_config_gives_same_bytes_and_reuses_the_file(tmp_path) -> None:
    first = ensure_synthetic_corpus(_cfg(tmp_path / "a"), CountingGenerate(), VOCAB, "k")
    second = ensure_synthetic_corpus(_cfg(tmp_path / "b"), CountingGenerate(), VOCAB, "k")
    assert open(first, "rb").read() == open(second, "rb").read()
    gen = CountingGenerate()
    assert ensure_synthetic_corpus(_cfg(tmp_path / "a"), gen, VOCAB, "k") == first
    assert gen.calls == []  # reused, not regenerated


def test_key_seed_and_vocab_change_the_file(tmp_path) -> None:
    base = ensure_synthetic_corpus(_cfg(tmp_path), CountingGenerate(), VOCAB, "k")
    other_key = ensure_synthetic_corpus(_cfg(tmp_path), CountingGenerate(), VOCAB, "other/target")
    other_seed = ensure_synthetic_corpus(_cfg(tmp_path, synthetic_seed=1), CountingGenerate(), VOCAB, "k")
    assert len({base, other_key, other_seed}) == 3
    assert open_dataset(base).row(0)[0].tolist() != open_dataset(other_seed).row(0)[0].tolist()
    assert os.path.basename(other_key).startswith("synthetic-other_target-")


def test_failing_generator_leaves_no_file(tmp_path) -> None:
    calls = []

    def broken(prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("target died")
        return affine_generate(prompts, max_new_tokens, VOCAB)

    cfg = _cfg(tmp_path)
    with pytest.raises(RuntimeError, match="target died"):
        ensure_synthetic_corpus(cfg, broken, VOCAB, "k")
    assert not os.path.exists(cfg.cache_dir) or os.listdir(cfg.cache_dir) == []


def test_generator_contract_violations_are_reported(tmp_path) -> None:
    with pytest.raises(ValueError, match="completions for"):
        ensure_synthetic_corpus(_cfg(tmp_path), lambda p, n: [[1] * n], VOCAB, "k")
    with pytest.raises(ValueError, match="outside"):
        ensure_synthetic_corpus(_cfg(tmp_path), lambda p, n: [[VOCAB] * n for _ in p], VOCAB, "k")


def test_early_stopping_generator_gives_shorter_completions(tmp_path) -> None:
    ds = open_dataset(ensure_synthetic_corpus(_cfg(tmp_path), lambda p, n: [[5, 6] for _ in p], VOCAB, "eos"))
    assert all(ds.loss_counts() == 2)


def test_default_corpus_flows_through_split_plan_and_collate(tmp_path) -> None:
    from dflash.buckets import plan_epoch
    from dflash.collate import collate
    from dflash.data import split_for_training

    cfg = DataConfig(cache_dir=str(tmp_path / "cache"))  # the defaults the trainer uses
    ds = open_dataset(ensure_synthetic_corpus(cfg, CountingGenerate(), VOCAB, "k"))
    train, held = split_for_training(
        ds, min_loss_tokens=cfg.min_loss_tokens, heldout_samples=cfg.heldout_samples, seed=cfg.shuffle_seed
    )
    assert len(held) == cfg.heldout_samples and len(train) + len(held) == len(ds)
    plan = plan_epoch(train.lengths, cfg.bucket_boundaries, cfg.token_budget, cfg.shuffle_seed, 0)
    supervised = 0
    for seq, batch in enumerate(plan):
        tb = collate(train, batch, seq=seq, epoch=0)
        assert tb.input_ids.numel() <= cfg.token_budget
        supervised += int(tb.loss_mask.sum())
    assert supervised == int(train.loss_counts().sum())


def test_coarse_quantum_and_larger_batch_mean_fewer_calls(tmp_path) -> None:
    fine, coarse = CountingGenerate(), CountingGenerate()
    ensure_synthetic_corpus(_cfg(tmp_path / "a"), fine, VOCAB, "k")
    cfg = _cfg(tmp_path / "b", synthetic_prompt_quantum=16, synthetic_generate_batch=64)
    ds = open_dataset(ensure_synthetic_corpus(cfg, coarse, VOCAB, "k"))
    lengths = set().union(*coarse.prompt_lengths)
    assert all(n % 16 == 0 for n in lengths) and max(n for n, _ in coarse.calls) <= 64
    assert any(n > GENERATE_BATCH for n, _ in coarse.calls)
    assert len(coarse.calls) < len(fine.calls)
    assert len(ds) == 200


def test_default_knobs_keep_the_old_file_name_and_others_change_it(tmp_path) -> None:
    from dflash.synthetic import corpus_path

    base = corpus_path(_cfg(tmp_path), VOCAB, "k")
    assert base == corpus_path(
        _cfg(tmp_path, synthetic_prompt_quantum=PROMPT_LEN_QUANTUM, synthetic_generate_batch=GENERATE_BATCH), VOCAB, "k"
    )
    assert (
        len(
            {
                base,
                corpus_path(_cfg(tmp_path, synthetic_prompt_quantum=8), VOCAB, "k"),
                corpus_path(_cfg(tmp_path, synthetic_generate_batch=64), VOCAB, "k"),
            }
        )
        == 3
    )
