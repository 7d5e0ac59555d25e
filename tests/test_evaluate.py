"""Draft-then-verify evaluation: lossless output, tau bounds, train/inference consistency."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dflash.config import DrafterConfig, TargetConfig
from dflash.drafter import DFlashDrafter, resolve_layer_ids, resolve_mask_token_id
from dflash.evaluate import acceptance_length, speculative_generate
from dflash.masks import sdpa_mask
from dflash.objective import DFlashObjective
from dflash.target import build_target

BS = 4
PROMPTS = [[5, 17, 33, 9, 41, 2], [100, 3, 3, 250, 7], [60, 61, 62, 63, 64, 65, 66]]


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


@pytest.fixture(scope="module")
def objective(target):
    cfg = DrafterConfig(num_layers=1, block_size=BS, init_seed=1)
    layer_ids = resolve_layer_ids(cfg, target.num_layers)
    drafter = DFlashDrafter(cfg, hidden_size=target.hidden_size, num_target_layers=target.num_layers,
                            vocab_size=target.vocab_size, layer_ids=layer_ids)
    return DFlashObjective(drafter, target.embed_tokens, target.lm_head, BS,
                           resolve_mask_token_id(cfg, target.vocab_size), cfg.resolved_gamma())


class OracleDrafter(torch.nn.Module):
    """Test-only drafter that always proposes the target's own greedy continuation."""

    def __init__(self, target, prompt, max_new_tokens, layer_ids):
        super().__init__()
        self.layer_ids, self.block_size, self.vocab = layer_ids, BS, target.vocab_size
        self.greedy = prompt + target.greedy_generate([prompt], max_new_tokens + BS)[0]

    def draft_logits(self, context, anchor_tokens):
        anchor = context.shape[1]
        assert anchor_tokens.item() == self.greedy[anchor]
        want = torch.tensor(self.greedy[anchor + 1: anchor + BS])
        return F.one_hot(want, self.vocab).float()[None]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_oracle_drafter_reaches_tau_equal_block_size(target, objective, prompt):
    max_new = 1 + 5 * BS  # prefill token + five full rounds
    oracle = OracleDrafter(target, prompt, max_new, objective.layer_ids)
    out, rounds = speculative_generate(target, oracle, prompt, max_new)
    assert rounds == [BS] * 5
    assert out == target.greedy_generate([prompt], max_new)[0]
    assert acceptance_length(target, oracle, [prompt], max_new) == BS


def test_random_drafter_is_lossless_and_tau_near_one(target, objective):
    max_new = 24
    tau = acceptance_length(target, objective, PROMPTS, max_new)
    assert 1.0 <= tau < 1.5
    for prompt in PROMPTS:
        out, rounds = speculative_generate(target, objective, prompt, max_new)
        assert out == target.greedy_generate([prompt], max_new)[0]
        assert 1 + sum(rounds) == max_new == len(out)


def test_inference_draft_equals_training_block_at_the_same_anchor(target, objective):
    # Training sees context < anchor through the mask; inference passes only those rows.
    seq = torch.tensor([PROMPTS[0] + target.greedy_generate([PROMPTS[0]], 12)[0]])
    seq_len, anchor = seq.shape[1], 9
    context = target.hidden(seq, torch.ones_like(seq), objective.layer_ids)
    anchors, keep = torch.tensor([[anchor]]), torch.tensor([[True]])
    ids, positions = objective._block_inputs(seq, anchors)
    with torch.no_grad():
        hidden = objective.drafter(objective.embed(ids), context, positions,
                                   sdpa_mask(anchors, keep, BS, seq_len))
        train_logits = objective.lm_head(hidden[:, 1:])
    infer_logits = objective.draft_logits(context[:, :anchor], seq[:, anchor])
    torch.testing.assert_close(infer_logits, train_logits, atol=1e-5, rtol=1e-5)


def test_bad_evaluation_input_is_rejected(target, objective):
    with pytest.raises(ValueError):
        acceptance_length(target, objective, [], 8)
    with pytest.raises(ValueError):
        speculative_generate(target, objective, [], 8)
