"""dflash.llama is transformers' seeded LlamaForCausalLM in plain torch: the same weights, the same
outputs on every path the trainer takes (padding and packed masks, the KV cache, the taps), and the
same shipped corpus; gpu-default builds it, the presets the harness studies keep transformers'."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dflash import presets
from dflash.config import TargetConfig
from dflash.corpus import target_cache_key
from dflash.target import build_target, document_inputs
from harness.runtime.errors import ConfigError

SHAPES = [
    TargetConfig(),
    TargetConfig(
        hidden_size=48, num_layers=3, num_heads=6, num_kv_heads=2, intermediate_size=80, vocab_size=97, init_seed=3
    ),
]


def _pair(cfg: TargetConfig):
    return build_target(cfg, "cpu"), build_target(dataclasses.replace(cfg, impl="native"), "cpu")


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def pair(request):
    return _pair(dataclasses.replace(SHAPES[0], dtype=request.param))


@pytest.mark.parametrize("cfg", SHAPES, ids=["default", "odd"])
def test_the_seeded_weights_are_transformers_weight_for_weight(cfg) -> None:
    hf, native = (t.model.state_dict() for t in _pair(cfg))
    assert hf.keys() == native.keys()
    assert all(torch.equal(hf[k], native[k]) for k in hf)


def _ids(rows: int, length: int) -> torch.Tensor:
    return torch.randint(1, 255, (rows, length), generator=torch.Generator().manual_seed(1))


def test_taps_and_logits_equal_transformers(pair) -> None:
    hf, native = pair
    ids = _ids(3, 20)
    pad = torch.ones(3, 20, dtype=torch.long)
    pad[1, 15:], pad[2, 7:] = 0, 0
    assert torch.equal(hf.hidden(ids, pad, (0, 3)), native.hidden(ids, pad, (0, 3)))
    assert torch.equal(hf.hidden_hooked(ids, pad, (1, 3)), native.hidden_hooked(ids, pad, (1, 3)))
    assert torch.equal(native.hidden(ids, pad, (1, 3)), native.hidden_hooked(ids, pad, (1, 3)))
    (a, ca, _), (b, cb, _) = hf.logits_and_hidden(ids, (0, 2)), native.logits_and_hidden(ids, (0, 2))
    assert torch.equal(a, b) and torch.equal(ca, cb)


def test_packed_documents_equal_transformers(pair) -> None:
    hf, native = pair
    doc = torch.tensor([[0] * 8 + [1] * 7 + [-1] * 5, [0] * 20, [0] * 3 + [1] * 3 + [2] * 14])
    mask, pos = document_inputs(doc)
    ids = _ids(3, 20)
    assert torch.equal(hf.hidden(ids, mask, (0, 3), pos), native.hidden(ids, mask, (0, 3), pos))


def test_cached_generation_and_the_probe_equal_transformers(pair) -> None:
    hf, native = pair
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [3] * 7]
    assert hf.greedy_generate(prompts, 12) == native.greedy_generate(prompts, 12)
    rows = [p + g for p, g in zip(prompts, native.greedy_generate(prompts, 6))]
    assert hf.next_tokens(rows) == native.next_tokens(rows)


def test_gpu_default_builds_native_and_keeps_its_shipped_corpus_name() -> None:
    cfg = presets.get("gpu-default")
    assert cfg.target.impl == "native"
    assert target_cache_key(cfg) == target_cache_key(
        dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, impl="transformers"))
    )
    # The presets the harness's campaigns ran keep transformers' target (its capture race, R8).
    assert {presets.get(n).target.impl for n in ("gpu-launch-bound", "gpu-gpu-bound", "gpu-multi", "tiny-cpu")} == {
        "transformers"
    }


@pytest.mark.parametrize(
    "bad", [{"impl": "jax"}, {"impl": "native", "arch": "qwen3"}, {"impl": "native", "path": "/tmp/model"}]
)
def test_what_native_cannot_build_is_refused(bad) -> None:
    with pytest.raises(ConfigError, match="target.impl"):
        TargetConfig(**bad)
