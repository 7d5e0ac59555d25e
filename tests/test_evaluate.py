"""Draft-then-verify evaluation: lossless output, tau bounds, train/inference consistency."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from small_models import objective_for

from dflash import evaluate
from dflash.anchors import sample_anchors
from dflash.config import DrafterConfig, TargetConfig
from dflash.evaluate import (
    PAD_QUANTUM,
    VerifyGraphs,
    _right_pad,
    acceptance_length,
    speculative_generate,
    speculative_generate_batch,
)
from dflash.masks import sdpa_mask
from dflash.target import build_target
from harness.runtime.errors import ConfigError

BS = 4
PROMPTS = [[5, 17, 33, 9, 41, 2], [100, 3, 3, 250, 7], [60, 61, 62, 63, 64, 65, 66]]


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


@pytest.fixture(scope="module")
def objective(target):
    return make_objective(target)


def make_objective(target, **drafter):
    cfg = DrafterConfig(num_layers=drafter.pop("num_layers", 1), block_size=BS, init_seed=1, **drafter)
    return objective_for(cfg, target)


class OracleDrafter(torch.nn.Module):
    """Test-only drafter that always proposes the target's own greedy continuation."""

    def __init__(self, target, prompt, max_new_tokens, layer_ids):
        super().__init__()
        self.layer_ids, self.block_size, self.vocab = layer_ids, BS, target.vocab_size
        self.greedy = prompt + target.greedy_generate([prompt], max_new_tokens + BS)[0]

    def draft_logits(self, context, anchor_tokens, context_lens=None):
        anchor = context.shape[1] if context_lens is None else context_lens[0]  # the batch pads it
        assert anchor_tokens.item() == self.greedy[anchor]
        want = torch.tensor(self.greedy[anchor + 1 : anchor + BS])
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
        hidden = objective.drafter(objective.embed(ids), context, positions, sdpa_mask(anchors, keep, BS, seq_len))
        train_logits = objective.lm_head(hidden[:, 1:])
    infer_logits = objective.draft_logits(context[:, :anchor], seq[:, anchor])
    torch.testing.assert_close(infer_logits, train_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "drafter",
    [{}, {"num_layers": 2, "layer_types": ("sliding_attention", "full_attention"), "sliding_window": 3}],
    ids=["full", "sliding"],
)
def test_rows_of_different_lengths_in_one_batch_draft_what_each_drafts_alone(target, drafter):
    # The evaluation's lockstep pads contexts to the longest row: the mask must hide the padding.
    objective = make_objective(target, **drafter)
    seqs = [p + target.greedy_generate([p], 5)[0] for p in PROMPTS]
    lens = [len(p) for p in PROMPTS]  # anchors at the prompts' ends: 6, 5, 7
    ctx = [
        target.hidden(torch.tensor([q]), torch.ones(1, len(q), dtype=torch.long), objective.layer_ids)[0] for q in seqs
    ]
    padded = torch.zeros(len(seqs), max(lens), ctx[0].shape[-1])
    for row, (c, n) in enumerate(zip(ctx, lens)):
        padded[row, :n] = c[:n]
        padded[row, n:] = 7.0  # anything: a leak would change the drafts
    anchors = torch.tensor([q[n] for q, n in zip(seqs, lens)])
    with torch.no_grad():
        together = objective.draft_logits(padded, anchors, context_lens=lens)
        for row, (c, n) in enumerate(zip(ctx, lens)):
            alone = objective.draft_logits(c[None, :n], anchors[row : row + 1])
            torch.testing.assert_close(together[row : row + 1], alone, atol=1e-5, rtol=1e-5)


def test_the_batched_loop_gives_each_prompt_its_own_tokens_and_rounds(target, objective):
    together = speculative_generate_batch(target, objective, PROMPTS, 13)
    assert together == [speculative_generate(target, objective, p, 13) for p in PROMPTS]
    with pytest.raises(ValueError):
        speculative_generate_batch(target, objective, [PROMPTS[0], []], 8)


def test_the_batch_keeps_every_row_until_the_last_is_done(target, objective, monkeypatch):
    # A batch that shrinks as rows finish is a new shape a round: on CUDA, a new SDPA plan.
    seen = []
    forward = target.logits_and_hidden

    def recording(ids, layer_ids):
        seen.append(ids.shape[0])
        return forward(ids, layer_ids)

    monkeypatch.setattr(target, "logits_and_hidden", recording)
    first_row_right = FirstRowOracle(target, PROMPTS, 13, objective.layer_ids)
    results = speculative_generate_batch(target, first_row_right, PROMPTS, 13)
    assert len(results[0][1]) < len(results[1][1])  # the first row finishes rounds before the others
    assert set(seen) == {len(PROMPTS)}


class FirstRowOracle(OracleDrafter):
    """Test-only batch drafter: OracleDrafter's draft for row 0 (its prompt), token 0 for the rest."""

    def __init__(self, target, prompts, max_new_tokens, layer_ids):
        super().__init__(target, prompts[0], max_new_tokens, layer_ids)
        self.rows = len(prompts)

    def draft_logits(self, context, anchor_tokens, context_lens=None):
        anchor = context.shape[1] if context_lens is None else context_lens[0]
        want = torch.zeros(self.rows, BS - 1, dtype=torch.long)
        want[0] = torch.tensor(self.greedy[anchor + 1 : anchor + BS])
        return F.one_hot(want, self.vocab).float()


def test_only_the_native_target_on_cuda_replays_graphs(target):
    assert not VerifyGraphs.fits(target)  # transformers' target, on the CPU
    assert not VerifyGraphs.fits(build_target(TargetConfig(impl="native"), "cpu"))


@pytest.mark.cuda
def test_the_graphed_verify_gives_what_the_eager_one_gives(monkeypatch):
    native = build_target(TargetConfig(impl="native"), "cuda:0")
    obj = make_objective(native).to("cuda:0")
    prompts = [p * 6 for p in PROMPTS]  # 30-42 tokens: the rows cross a PAD_QUANTUM boundary
    recorded = []
    record = VerifyGraphs._record
    monkeypatch.setattr(VerifyGraphs, "_record", lambda self, ids: recorded.append(ids.shape) or record(self, ids))
    graphed = speculative_generate_batch(native, obj, prompts, 24)
    assert len(recorded) == len(set(recorded)) >= 2
    monkeypatch.setattr(VerifyGraphs, "fits", staticmethod(lambda target: False))
    assert graphed == speculative_generate_batch(native, obj, prompts, 24)


def test_the_evaluation_makes_one_verifier_for_all_its_batches(target, objective, monkeypatch):
    made = []
    make = evaluate.verifier
    monkeypatch.setattr(evaluate, "verifier", lambda *a: made.append(a) or make(*a))
    tau = acceptance_length(target, objective, PROMPTS * 2, 9, batch=len(PROMPTS))
    assert len(made) == 1
    assert tau == acceptance_length(target, objective, PROMPTS, 9)  # the same prompts twice: the same tau


@pytest.mark.cuda
def test_the_evaluation_records_each_shape_once_across_batches(monkeypatch):
    native = build_target(TargetConfig(impl="native"), "cuda:0")
    obj = make_objective(native).to("cuda:0")
    recorded = []
    record = VerifyGraphs._record
    monkeypatch.setattr(VerifyGraphs, "_record", lambda self, ids: recorded.append(ids.shape) or record(self, ids))
    acceptance_length(native, obj, PROMPTS * 2, 12, batch=len(PROMPTS))  # two batches of the same shapes
    assert recorded and len(recorded) == len(set(recorded))


def test_verify_rows_pad_to_a_few_lengths():
    # Every new sequence length costs SDPA a first use on CUDA: rows are padded to a multiple of
    # PAD_QUANTUM with 0, so a run's rounds share a handful of lengths.
    rows = [[5] * 3, [7] * (PAD_QUANTUM + 1)]
    padded = _right_pad(rows, torch.device("cpu"))
    assert padded.shape == (2, 2 * PAD_QUANTUM)
    assert padded[0, :3].tolist() == [5] * 3 and not padded[0, 3:].any()
    assert _right_pad([[1] * PAD_QUANTUM], torch.device("cpu")).shape == (1, PAD_QUANTUM)


def test_bad_evaluation_input_is_rejected(target, objective):
    with pytest.raises(ValueError):
        acceptance_length(target, objective, [], 8)
    with pytest.raises(ValueError):
        speculative_generate(target, objective, [], 8)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_embedded_target_is_deterministic_frozen_and_in_eval_mode(arch):
    a, b = build_target(TargetConfig(arch=arch), "cpu"), build_target(TargetConfig(arch=arch), "cpu")
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(p, q), name
        assert not p.requires_grad
    assert not a.model.training
    assert (a.num_layers, a.hidden_size, a.vocab_size) == (4, 64, 256)


def test_hidden_taps_hf_index_layer_plus_one(target):
    ids = torch.tensor([PROMPTS[0]])
    ctx = target.hidden(ids, torch.ones_like(ids), (0, 3))
    with torch.no_grad():
        states = target.model(ids, output_hidden_states=True).hidden_states
    assert ctx.shape == (1, len(PROMPTS[0]), 2 * target.hidden_size) and not ctx.requires_grad
    torch.testing.assert_close(ctx, torch.cat([states[1], states[4]], dim=-1))


def test_greedy_generate_matches_an_uncached_argmax_loop(target):
    got = target.greedy_generate(PROMPTS, 6)
    for prompt, out in zip(PROMPTS, got):
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(6):
                seq.append(int(target.model(torch.tensor([seq])).logits[0, -1].argmax()))
        assert out == seq[len(prompt) :]


def test_cached_logits_and_hidden_equal_a_full_forward(target):
    full = torch.tensor([PROMPTS[2]])
    lg_full, h_full, _ = target.logits_and_hidden(full, (1, 2))
    lg_a, h_a, cache = target.logits_and_hidden(full[:, :4], (1, 2))
    lg_b, h_b, _ = target.logits_and_hidden(full[:, 4:], (1, 2), cache)
    torch.testing.assert_close(torch.cat([lg_a, lg_b], 1), lg_full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([h_a, h_b], 1), h_full, atol=1e-5, rtol=1e-5)


def test_missing_target_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        build_target(TargetConfig(path=str(tmp_path / "nope")), "cpu")
    with pytest.raises(ConfigError):
        build_target(TargetConfig(path=str(tmp_path)), "cpu")  # a folder without a model


@pytest.mark.slow
def test_training_on_target_regenerated_data_raises_tau(target):
    # The DFlash recipe in miniature: the target regenerates the answers, the drafter trains on
    # random anchors, and the real draft-then-verify loop accepts more than the random drafter.
    objective = make_objective(target)  # trained here: not the shared module fixture
    g = torch.Generator().manual_seed(0)
    prompt_len, seq_len, rows = 8, 32, 32
    prompts = [torch.randint(1, 255, (prompt_len,), generator=g).tolist() for _ in range(rows)]
    answers = target.greedy_generate(prompts, seq_len - prompt_len)
    ids = torch.tensor([p + a for p, a in zip(prompts, answers)])
    loss_mask = (torch.arange(seq_len) >= prompt_len).long().expand(rows, -1)
    lengths = torch.full((rows,), seq_len)
    context = target.hidden(ids, torch.ones_like(ids), objective.layer_ids)
    tau_before = acceptance_length(target, objective, prompts[:6], seq_len - prompt_len)
    opt = torch.optim.AdamW(objective.drafter.parameters(), lr=3e-3)
    for _ in range(150):
        rows_sel = torch.randperm(rows, generator=g)[:8]
        anchors, keep = sample_anchors(loss_mask[rows_sel], lengths[rows_sel], 8, BS, g)
        opt.zero_grad()
        objective(ids[rows_sel], loss_mask[rows_sel], context[rows_sel], anchors, keep).loss.backward()
        opt.step()
    tau_after = acceptance_length(target, objective, prompts[:6], seq_len - prompt_len)
    assert tau_before < 1.2 and tau_after > 1.5, (tau_before, tau_after)
    # Rows now accept different numbers of drafts a round, so the lockstep's rows drift apart in
    # length: each still gets what it gets alone.
    mixed = [*prompts[:6], PROMPTS[0]]
    together = speculative_generate_batch(target, objective, mixed, seq_len - prompt_len)
    assert together == [speculative_generate(target, objective, p, seq_len - prompt_len) for p in mixed]
    assert len({len(r) for _, r in together}) > 1  # the rows did drift apart
