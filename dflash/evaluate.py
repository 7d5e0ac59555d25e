"""Acceptance length tau from a real greedy draft-then-verify loop.

Follows z-lab/dflash `dflash_generate` at temperature 0, written for clarity: the target is
re-run over the whole prefix each round instead of keeping a cropped KV cache (identical results
for a causal target; fine for the tiny models this runs on during training).

One round, with `tokens` = prompt + verified output and anchor = the last verified token at
position P = len(tokens) - 1 (its target hidden state does not exist yet):
  1. draft: block [tokens[P], MASK x (B-1)] at positions P..P+B-1, context = tapped target states
     of positions 0..P-1 -> B-1 greedy draft tokens d_1..d_{B-1};
  2. verify: target over tokens + drafts; t_j = target's greedy token after block row j-1;
  3. accepted = length of the prefix where d_j == t_j; commit d_1..d_acc and the bonus t_{acc+1};
  4. record acc + 1 (capped by the tokens still wanted, as z-lab does).
Because every committed token is the target's own greedy choice, the output equals plain greedy
decoding whatever the drafter does (lossless); the drafter only changes how many rounds it takes.
tau = mean of the recorded values over all rounds of all prompts.
"""

from __future__ import annotations

import torch

from dflash.target import TargetModel


def _greedy_prefix_match(draft: list[int], verify: list[int]) -> int:
    accepted = 0
    while accepted < len(draft) and draft[accepted] == verify[accepted]:
        accepted += 1
    return accepted


@torch.no_grad()
def speculative_generate(
    target: TargetModel, objective, prompt: list[int], max_new_tokens: int
) -> tuple[list[int], list[int]]:
    """(new tokens, tokens produced per verify round) for one prompt.

    `objective` needs `layer_ids`, `block_size` and `draft_logits(context, anchor_tokens)`
    (DFlashObjective has them).
    """
    if not prompt or max_new_tokens < 1:
        raise ValueError("need a non-empty prompt and max_new_tokens >= 1")
    layer_ids, block = objective.layer_ids, objective.block_size
    dev = target.device
    tokens = list(prompt)
    logits, context, _ = target.logits_and_hidden(torch.tensor([tokens], device=dev), layer_ids)
    tokens.append(int(logits[0, -1].argmax()))  # prefill: the first token comes from the target
    rounds: list[int] = []
    while len(tokens) - len(prompt) < max_new_tokens:
        anchor = len(tokens) - 1
        assert context.shape[1] == anchor, "context must cover exactly the positions < anchor"
        anchor_tok = torch.tensor([tokens[-1]], device=dev)
        draft = objective.draft_logits(context, anchor_tok)[0].argmax(-1).tolist()
        logits, full_ctx, _ = target.logits_and_hidden(torch.tensor([tokens + draft], device=dev), layer_ids)
        verify = logits[0, anchor : anchor + block].argmax(-1).tolist()  # [B]
        accepted = _greedy_prefix_match(draft, verify[: block - 1])
        produced = min(accepted + 1, max_new_tokens - (len(tokens) - len(prompt)))
        tokens += (draft[:accepted] + [verify[accepted]])[:produced]
        context = full_ctx[:, : len(tokens) - 1]  # states now exist up to the new anchor
        rounds.append(produced)
    return tokens[len(prompt) :], rounds


def acceptance_length(target: TargetModel, drafter_obj, prompts: list[list[int]], max_new_tokens: int) -> float:
    """tau: mean tokens produced per verify round (accepted drafts + 1), pooled over prompts."""
    if not prompts:
        raise ValueError("acceptance_length needs at least one prompt")
    # No eval()/train() toggling: the drafter has no mode-dependent layers, and flipping the
    # mode of a module another thread may be training would itself be shared-state mutation.
    rounds: list[int] = []
    for prompt in prompts:
        rounds += speculative_generate(target, drafter_obj, prompt, max_new_tokens)[1]
    # max_new_tokens == 1 leaves no verify round: the prefill token alone, tau = 1 by definition.
    return sum(rounds) / len(rounds) if rounds else 1.0
