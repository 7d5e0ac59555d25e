"""Shipped synthetic corpora: found by name for the GPU presets, checksummed, read in place when the
run's target reproduces their probe rows, regenerated otherwise; generation stays reproducible."""

from __future__ import annotations

import os

import pytest
import torch

from dflash import packaged_corpus, presets
from dflash.config import DataConfig, TargetConfig
from dflash.corpus import target_cache_key
from dflash.data import open_dataset
from dflash.synthetic import corpus_path, ensure_synthetic_corpus
from dflash.target import build_target
from tests.datautil import affine_generate

VOCAB = 256


def _shipped() -> list[str]:
    return sorted(os.path.join(packaged_corpus.FOLDER, f) for f in os.listdir(packaged_corpus.FOLDER))


@pytest.mark.parametrize("preset", ["gpu-default", "gpu-multi", "gpu-launch-bound", "gpu-gpu-bound"])
def test_every_gpu_preset_finds_its_shipped_corpus(preset) -> None:
    cfg = presets.get(preset)
    path = corpus_path(cfg.data, cfg.target.vocab_size, target_cache_key(cfg))
    assert packaged_corpus.shipped_path(path) is not None


def test_shipped_files_are_small_and_match_their_checksums() -> None:
    files = _shipped()
    assert files and sum(os.path.getsize(f) for f in files) < 2_000_000
    for f in files:
        assert packaged_corpus.content_digest(open_dataset(f)) == packaged_corpus.recorded_digest(f)


def _generated(tmp_path, name: str, generate) -> str:
    cfg = DataConfig(cache_dir=str(tmp_path / name), synthetic_samples=48, synthetic_max_len=48)
    return ensure_synthetic_corpus(cfg, generate, VOCAB, "tiny-llama")


def test_regenerating_with_the_target_gives_the_same_content(tmp_path) -> None:
    cfg = TargetConfig(hidden_size=32, num_layers=2, vocab_size=VOCAB)
    # Two targets built apart: the seeded init, not a shared object, makes them the same target.
    first = _generated(tmp_path, "a", build_target(cfg, "cpu").greedy_generate)
    again = _generated(tmp_path, "b", build_target(cfg, "cpu").greedy_generate)
    digest = packaged_corpus.content_digest(open_dataset(first))
    assert digest == packaged_corpus.content_digest(open_dataset(again))


def _ship(tmp_path, monkeypatch) -> str:
    """A generated corpus packaged into a shipped folder of its own; the cache left empty."""
    arrow = _generated(tmp_path, "gen", lambda p, n: affine_generate(p, n, VOCAB))
    monkeypatch.setattr(packaged_corpus, "FOLDER", str(tmp_path / "shipped"))
    shipped = packaged_corpus.package(arrow)
    os.unlink(arrow)
    return shipped


def test_shipped_corpus_is_read_in_place_when_the_target_reproduces_it(tmp_path, monkeypatch) -> None:
    shipped = _ship(tmp_path, monkeypatch)
    lines: list[str] = []

    def generate(prompts, n):
        assert n == 1  # only the probe runs, one token after each prefix
        return affine_generate(prompts, n, VOCAB)

    cfg = DataConfig(cache_dir=str(tmp_path / "gen"), synthetic_samples=48, synthetic_max_len=48)
    assert ensure_synthetic_corpus(cfg, generate, VOCAB, "tiny-llama", report=lines.append) == shipped
    assert "agree" in lines[0] and "using it" in lines[0]


def test_another_targets_shipped_corpus_is_regenerated(tmp_path, monkeypatch) -> None:
    shipped = _ship(tmp_path, monkeypatch)
    lines: list[str] = []

    def other(prompts, n):
        return [[(t + 7) % (VOCAB - 2) + 1 for t in row] for row in affine_generate(prompts, n, VOCAB)]

    cfg = DataConfig(cache_dir=str(tmp_path / "gen"), synthetic_samples=48, synthetic_max_len=48)
    path = ensure_synthetic_corpus(cfg, other, VOCAB, "tiny-llama", report=lines.append)
    assert path != shipped and os.path.isfile(path) and "regenerating" in lines[0]


def test_a_target_chooses_its_own_corpus_teacher_forced_and_not_another_seeds(tmp_path, monkeypatch) -> None:
    """The probe's one forward agrees with the greedy generation that wrote the corpus."""
    cfg = TargetConfig(hidden_size=32, num_layers=2, vocab_size=VOCAB)
    arrow = _generated(tmp_path, "gen", build_target(cfg, "cpu").greedy_generate)
    monkeypatch.setattr(packaged_corpus, "FOLDER", str(tmp_path / "shipped"))
    shipped = packaged_corpus.package(arrow)
    total = packaged_corpus.PROBE_ROWS * packaged_corpus.PROBE_TOKENS
    assert packaged_corpus.matches(shipped, build_target(cfg, "cpu").next_tokens) == (
        True,
        f"{total} of {total} probe tokens agree",
    )
    other = build_target(TargetConfig(hidden_size=32, num_layers=2, vocab_size=VOCAB, init_seed=1), "cpu")
    assert packaged_corpus.matches(shipped, other.next_tokens)[0] is False


def test_random_target_is_built_in_its_dtype_with_the_seeded_weights() -> None:
    cfg = TargetConfig(hidden_size=32, num_layers=2, vocab_size=VOCAB)
    fp32 = build_target(cfg, "cpu")
    bf16 = build_target(TargetConfig(hidden_size=32, num_layers=2, vocab_size=VOCAB, dtype="bfloat16"), "cpu")
    assert fp32.embed_tokens.weight.dtype == torch.float32 and bf16.embed_tokens.weight.dtype == torch.bfloat16
    assert torch.equal(bf16.embed_tokens.weight, fp32.embed_tokens.weight.bfloat16())
