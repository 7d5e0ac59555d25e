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

The evaluation runs its prompts as one batch in lockstep (speculative_generate_batch): at the
trainer's sizes every forward is launch-bound, so a round of 16 prompts costs about what one
prompt's round does, and the end-of-run evaluation was the largest phase outside training on the
H200 (16-29 s for 16 prompts one at a time). Rows of different lengths are right-padded for the
target (causal: a row's own positions never see its padding) and masked for the drafter (its
block sees all context, so the padding must be hidden from it). The target's rows are padded to a
multiple of PAD_QUANTUM: each round is a token or more longer, and every new length costs SDPA a
first use (cuDNN's backend builds a plan per shape): 16 prompts took 6.6-7.0 s on a fresh H100
padded to the longest row, 1.5-2.1 s padded to 32 (results/h100-2026-12-05-startup). The
drafter's context is padded the same way, its padding masked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dflash.llama import LlamaForCausalLM
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


PAD_QUANTUM = 32


@dataclass(frozen=True, slots=True)
class _Recorded:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor
    logits: torch.Tensor
    hidden: torch.Tensor


class VerifyGraphs:
    """The target's verify forward replayed from one CUDA graph per batch shape.

    A round launches the target's ~440 operations one by one from Python, launch-bound at the
    trainer's sizes; a graph launches them at once: gpu-default's evaluation took 0.6-0.7 s
    against 0.7-0.8 s on one H100, the same tau in every run (results/h100-2026-12-05-cuda-start/
    handful). Rows are padded to a multiple of PAD_QUANTUM, so an evaluation records a handful.
    Only dflash.llama's target on CUDA (transformers' masks are built with host-side checks, which
    a capture refuses). The logits a call returns are the graph's own memory, rewritten by the next
    call of the same shape; the context is a copy (rows keep theirs across rounds).
    """

    def __init__(self, target: TargetModel, layer_ids) -> None:
        self.target, self.layer_ids = target, tuple(layer_ids)
        self._graphs: dict[tuple[int, ...], _Recorded] = {}

    @staticmethod
    def fits(target: TargetModel) -> bool:
        return target.device.type == "cuda" and isinstance(target.model, LlamaForCausalLM)

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rec = self._graphs.get(tuple(ids.shape)) or self._record(ids)
        rec.ids.copy_(ids)
        rec.graph.replay()
        return rec.logits, rec.hidden.clone()

    def _record(self, ids: torch.Tensor) -> _Recorded:
        static = ids.clone()
        # One eager forward first, on a side stream as CUDA graphs ask: cuBLAS and SDPA pick and
        # allocate what they need outside the capture.
        side = torch.cuda.Stream(static.device)
        side.wait_stream(torch.cuda.current_stream(static.device))
        with torch.cuda.stream(side):
            self.target.logits_and_hidden(static, self.layer_ids)
        torch.cuda.current_stream(static.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a thread of the harness or the process using CUDA meanwhile is not an error.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            logits, hidden, _ = self.target.logits_and_hidden(static, self.layer_ids)
        rec = self._graphs[tuple(ids.shape)] = _Recorded(graph, static, logits, hidden)
        return rec


def _right_pad(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    """Rows right-padded with 0 to the longest, rounded up to a multiple of PAD_QUANTUM."""
    width = -(-max(len(r) for r in rows) // PAD_QUANTUM) * PAD_QUANTUM
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)


@torch.no_grad()
def speculative_generate_batch(
    target: TargetModel, objective, prompts: list[list[int]], max_new_tokens: int, target_forward=None
) -> list[tuple[list[int], list[int]]]:
    """speculative_generate for every prompt at once, one draft and one verify forward per round
    over every row until the last is done. `objective.draft_logits` takes `context_lens` (each row's
    context length; the context tensor is padded to a multiple of PAD_QUANTUM). `target_forward`
    is a `verifier(target, layer_ids)` shared with other batches (its graphs are recorded once)."""
    if not prompts or any(not p for p in prompts) or max_new_tokens < 1:
        raise ValueError("need non-empty prompts and max_new_tokens >= 1")
    layer_ids, block = objective.layer_ids, objective.block_size
    dev = target.device
    target_forward = target_forward or verifier(target, layer_ids)
    tokens = [list(p) for p in prompts]
    logits, hidden = target_forward(_right_pad(tokens, dev))
    contexts = [hidden[i, : len(p)] for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        tokens[i].append(int(logits[i, len(p) - 1].argmax()))  # prefill: the target's first token
    rounds: list[list[int]] = [[] for _ in prompts]

    def still_wanted(i: int) -> int:
        return max_new_tokens - (len(tokens[i]) - len(prompts[i]))

    wanted = [i for i in range(len(prompts)) if still_wanted(i) > 0]
    # Finished rows ride along, their results unread: a batch that shrank as rows finished gave
    # SDPA a new shape, and a new plan, most rounds.
    while wanted:
        lens = [c.shape[0] for c in contexts]  # == each row's anchor position
        # Padded like the target's rows: the drafter's attention gets a handful of lengths too.
        width = -(-max(lens) // PAD_QUANTUM) * PAD_QUANTUM
        context = torch.zeros(len(prompts), width, hidden.shape[-1], dtype=hidden.dtype, device=dev)
        for i, c in enumerate(contexts):
            context[i, : lens[i]] = c
        anchor_tok = torch.tensor([t[-1] for t in tokens], device=dev)
        if set(lens) == {width}:
            drafted = objective.draft_logits(context, anchor_tok)
        else:
            drafted = objective.draft_logits(context, anchor_tok, context_lens=lens)
        drafts = drafted.argmax(-1).tolist()
        logits, full_ctx = target_forward(_right_pad([t + d for t, d in zip(tokens, drafts, strict=True)], dev))
        greedy = logits.argmax(-1).tolist()  # one device sync a round, not one per row
        for i in wanted:
            anchor, draft = lens[i], drafts[i]
            verify = greedy[i][anchor : anchor + block]
            accepted = _greedy_prefix_match(draft, verify[: block - 1])
            produced = min(accepted + 1, still_wanted(i))
            tokens[i] += (draft[:accepted] + [verify[accepted]])[:produced]
            contexts[i] = full_ctx[i, : len(tokens[i]) - 1]
            rounds[i].append(produced)
        wanted = [i for i in wanted if still_wanted(i) > 0]
    return [(tokens[i][len(p) :], rounds[i]) for i, p in enumerate(prompts)]


def verifier(target: TargetModel, layer_ids):
    """ids -> (logits, tapped context): from CUDA graphs where the target allows, else eager."""
    if VerifyGraphs.fits(target):
        return VerifyGraphs(target, layer_ids)
    return lambda ids: target.logits_and_hidden(ids, layer_ids)[:2]


def acceptance_length(
    target: TargetModel, drafter_obj, prompts: list[list[int]], max_new_tokens: int, batch: int = 16
) -> float:
    """tau: mean tokens produced per verify round (accepted drafts + 1), pooled over prompts,
    `batch` prompts at a time."""
    if not prompts:
        raise ValueError("acceptance_length needs at least one prompt")
    # No eval()/train() toggling: the drafter has no mode-dependent layers, and flipping the
    # mode of a module another thread may be training would itself be shared-state mutation.
    rounds: list[int] = []
    target_forward = verifier(target, drafter_obj.layer_ids)
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        for _, r in speculative_generate_batch(target, drafter_obj, chunk, max_new_tokens, target_forward):
            rounds += r
    # max_new_tokens == 1 leaves no verify round: the prefill token alone, tau = 1 by definition.
    return sum(rounds) / len(rounds) if rounds else 1.0
