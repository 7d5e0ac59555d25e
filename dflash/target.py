"""The frozen target model: tapped hidden states for training, logits for verification.

DFlash conditions the drafter on a few target layers' hidden states. HF returns
`hidden_states[0]` = embedding output, so target layer `i` is read at index `i + 1`
(z-lab/dflash `extract_context_feature`, offset 1). The target is frozen and in eval mode;
its `embed_tokens` and `lm_head` are shared (read-only) with the drafter objective.

Token conventions of the embedded tiny target: id 0 is padding, the mask token defaults to
`vocab_size - 1` (it must exist in the target embedding: the drafter ships none).

Packed rows (several documents per row, `TokenBatch.doc_ids`): `document_inputs` turns the
document ids into a block-diagonal causal 4D mask AND per-document position ids, passed to the
forward together. The mask is what keeps a document's hidden states free of the others: it is an
explicit input that transformers (masking_utils `_preprocess_mask_arguments`) hands to attention
as-is for every model built on its mask utilities, instead of relying on its packed-sequence
guess from position ids (made only when no other mask is given). The positions restart at 0 for
each document, as when the document runs alone at inference: Llama/Qwen3's RoPE would not need
it (attention scores depend on position differences), but a target with absolute or
length-dependent position encodings would, and the states then equal the document run alone up
to float rounding (tests/test_packed_docs.py). The mask is [B, 1, L, L] bool (what transformers
builds for SDPA itself); linear-attention layers (hybrid targets) are not isolated by it.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import threading

import torch
from torch import nn

from dflash.config import TargetConfig
from dflash.llama import LlamaForCausalLM, LlamaShape
from harness.runtime.errors import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PAD_TOKEN_ID = 0


def _shape_fields(cfg: TargetConfig) -> dict:
    """The cfg numbers that make the embedded target, under transformers' config names."""
    return dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        pad_token_id=PAD_TOKEN_ID,
    )


def embedded_shape(cfg: TargetConfig) -> LlamaShape:
    """The embedded target's numbers as dflash.llama's shape (whatever target.impl builds it)."""
    return LlamaShape(**_shape_fields(cfg))


def _tiny_config(cfg: TargetConfig):
    """HF config for the embedded random target, built from the cfg numbers only."""
    common = dict(
        _shape_fields(cfg),
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,
    )
    if cfg.arch == "qwen3":
        # transformers takes seconds to import: the synthetic target does without it
        from transformers import Qwen3Config

        return Qwen3Config(head_dim=cfg.hidden_size // cfg.num_heads, **common)
    # transformers takes seconds to import: the synthetic target does without it
    from transformers import LlamaConfig

    return LlamaConfig(**common)


def _native_model(cfg: TargetConfig) -> nn.Module:
    """dflash.llama's seeded model: transformers' LlamaForCausalLM without its import."""
    shape = embedded_shape(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        return LlamaForCausalLM(shape)


def _build_hf_model(cfg: TargetConfig, device: torch.device | str) -> nn.Module:
    """The HF model (or dflash.llama's, target.impl=native) on `device` in target.dtype."""
    dtype = DTYPES[cfg.dtype]
    if cfg.path is not None:
        return _load_pretrained(cfg, dtype, device)
    if cfg.impl == "native":
        return _native_model(cfg).to(device=device, dtype=dtype)
    # transformers takes seconds to import: the synthetic target does without it
    from transformers import LlamaForCausalLM, Qwen3ForCausalLM

    hf_cfg = _tiny_config(cfg)
    hf_cfg._attn_implementation = "sdpa"
    cls = Qwen3ForCausalLM if cfg.arch == "qwen3" else LlamaForCausalLM
    # fork_rng: seeding must not disturb the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = cls(hf_cfg)
    # The seeded CPU init is the same target on every host: a shipped corpus (dflash.packaged_corpus)
    # is its output, where CUDA's generator draws other values on GPUs of another SM count. One
    # cast-and-copy takes it to the device (no second CPU copy in the target dtype).
    return model.to(device=device, dtype=dtype)


def _load_pretrained(cfg: TargetConfig, dtype: torch.dtype, device: torch.device | str) -> nn.Module:
    """A local checkpoint loaded straight onto `device` in `dtype` (no CPU copy first)."""
    # transformers takes seconds to import: the synthetic target does without it
    from transformers import AutoModelForCausalLM

    if not os.path.isdir(cfg.path):
        raise ConfigError(f"target.path {cfg.path!r} is not a directory")
    # transformers places the weights on the device as it reads them only through accelerate;
    # without it they are read in `dtype` on the CPU and moved once.
    placed = {"device_map": torch.device(device)} if importlib.util.find_spec("accelerate") else {}
    # Local only: the GPU hosts have no network (no silent hub download).
    try:
        model = AutoModelForCausalLM.from_pretrained(
            cfg.path, local_files_only=True, dtype=dtype, attn_implementation="sdpa", **placed
        )
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"target.path {cfg.path!r}: cannot load a causal LM: {first}") from None
    return model.to(device)


class TargetModel:
    """A frozen HF causal LM with the accessors DFlash needs.

    Invariants: every parameter has `requires_grad=False`; the model is in eval mode; all
    methods run under `torch.no_grad()` (not inference_mode: the returned context feeds the
    drafter's `fc`, and autograd refuses to save inference tensors for backward).

    Thread hazard (transformers 5.x, seen on 5.17 and 5.24): hidden states are collected by
    forward hooks that look up the active collector in `CompileableContextVar`
    (transformers/utils/output_capturing.py). While ANY thread is tracing an HF forward under
    torch.compile, that variable is a process-global (`compiling=True`, `global_var`), so an eager
    forward on another thread can append into the tracer's collector: silently wrong tapped
    states or `IndexError: tuple index out of range` (reproduced on CPU; transformers#44614 notes
    the limited thread-safety while compiling, transformers#46370 proposes a plain ContextVar).
    `torch.compiler.is_compiling()` is process-wide during any thread's trace (R8), so a drafter
    compile is enough: two eager target threads then collide (results/cpu-gpu-strategies).
    `hidden_hooked` avoids that machinery (the `target-hook-taps` fix).
    """

    def __init__(self, model: nn.Module) -> None:
        self._taps = threading.local()
        self._tap_hooks: list | None = None
        self._tap_lock = threading.Lock()
        model.eval()
        model.requires_grad_(False)
        self.model = model
        hf_cfg = model.config
        self.num_layers: int = hf_cfg.num_hidden_layers
        self.hidden_size: int = hf_cfg.hidden_size
        self.embed_tokens: nn.Embedding = model.get_input_embeddings()
        self.lm_head: nn.Linear = model.get_output_embeddings()
        self.vocab_size: int = self.embed_tokens.num_embeddings
        # transformers 5.24 renamed the cache argument/output `past_key_values` -> `cache`
        # (deprecated alias warns); 5.17 on the GPU host only knows `past_key_values`.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _run(self, input_ids: torch.Tensor, past, **kwargs):
        """One causal-LM forward with a cache; returns (output, cache)."""
        out = self.model(input_ids=input_ids, use_cache=True, **{self._cache_kw: past}, **kwargs)
        return out, out.get(self._cache_kw)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def check_layer_ids(self, layer_ids: tuple[int, ...] | list[int]) -> None:
        bad = [i for i in layer_ids if not 0 <= i < self.num_layers]
        if bad or not layer_ids:
            raise ConfigError(f"target layer ids {tuple(layer_ids)} must be non-empty and in [0, {self.num_layers})")

    @torch.no_grad()
    def hidden(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        layer_ids: tuple[int, ...] | list[int],
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tapped hidden states, concatenated on the feature axis: [B, L, k*H]. Packed rows pass
        the mask and positions of `document_inputs`."""
        # base_model skips the LM head: only the tapped states are needed here.
        out = self.model.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
            use_cache=False,
        )
        return _tap(out.hidden_states, layer_ids)

    def _install_taps(self) -> None:
        """Forward hooks on every decoder layer, installed once; each writes only into the
        calling thread's sink, so concurrent forwards on one model never see each other's."""
        with self._tap_lock:
            if self._tap_hooks is not None:
                return

            def make(i: int):
                def hook(module, args, output):
                    sink = getattr(self._taps, "sink", None)
                    if sink is not None and i in sink:
                        sink[i] = output[0] if isinstance(output, tuple) else output

                return hook

            self._tap_hooks = [
                layer.register_forward_hook(make(i)) for i, layer in enumerate(self.model.base_model.layers)
            ]

    @torch.no_grad()
    def hidden_hooked(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        layer_ids: tuple[int, ...] | list[int],
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`hidden` without transformers' output capture: per-thread layer hooks. Equal to
        `hidden` (HF's last hidden state is the final-normed one, so that index gets the norm)."""
        self._install_taps()
        sink: dict[int, torch.Tensor | None] = {i: None for i in layer_ids}
        self._taps.sink = sink
        try:
            self.model.base_model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
        finally:
            self._taps.sink = None
        last = self.num_layers - 1
        norm = self.model.base_model.norm
        return torch.cat([norm(sink[i]) if i == last else sink[i] for i in layer_ids], dim=-1)

    @torch.no_grad()
    def logits_and_hidden(self, input_ids: torch.Tensor, layer_ids: tuple[int, ...] | list[int], past=None):
        """(logits [B, L, V], tapped context [B, L, k*H], cache) for draft-then-verify.

        With `past` (an HF cache from a previous call) only the new tokens are fed; the caller
        owns cropping the cache after a rejected suffix (`past.crop(n)`).
        """
        out, cache = self._run(input_ids, past, output_hidden_states=True)
        return out.logits, _tap(out.hidden_states, layer_ids), cache

    @torch.no_grad()
    def greedy_generate(
        self, prompts: list[list[int]], max_new_tokens: int, eos_token_id: int | None = None
    ) -> list[list[int]]:
        """Greedy continuations (new tokens only) of each prompt, with a KV cache.

        Prompts of equal length are batched together (no padding needed, so results do not
        depend on which prompts share a batch). A continuation stops after `eos_token_id`.
        """
        results: dict[int, list[int]] = {}
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"prompt {i} is empty")
            by_len.setdefault(len(p), []).append(i)
        for idx in by_len.values():
            ids = torch.tensor([prompts[i] for i in idx], dtype=torch.long, device=self.device)
            new = self._greedy_batch(ids, max_new_tokens)
            for row, i in enumerate(idx):
                results[i] = _cut_at_eos(new[row].tolist(), eos_token_id)
        return [results[i] for i in range(len(prompts))]

    @torch.no_grad()
    def next_tokens(self, rows: list[list[int]]) -> list[list[int]]:
        """The target's greedy choice after each position of each row (teacher-forced), from one
        forward over the rows right-padded (causal: a row's positions never see its padding)."""
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [PAD_TOKEN_ID] * (width - len(r)) for r in rows], device=self.device)
        choice = self.model(input_ids=ids, use_cache=False).logits.argmax(-1)
        return [choice[i, : len(r)].tolist() for i, r in enumerate(rows)]

    def _greedy_batch(self, ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        out, past = self._run(ids, None)
        tokens = []
        nxt = out.logits[:, -1].argmax(-1)
        for _ in range(max_new_tokens):
            tokens.append(nxt)
            if len(tokens) == max_new_tokens:
                break
            out, past = self._run(nxt[:, None], past)
            nxt = out.logits[:, -1].argmax(-1)
        if not tokens:
            return ids.new_zeros((ids.shape[0], 0))
        return torch.stack(tokens, dim=1)


def document_inputs(doc_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention mask [B, 1, L, L] bool, position ids [B, L] int64) for rows of packed documents.

    Token q may see token k when k <= q and doc_ids[q] == doc_ids[k] (True = attend, the SDPA
    convention); a token's position is the number of earlier tokens of its document, so each
    document starts at 0. Padding (-1) forms its own document, which real tokens never see.
    """
    seq_len = doc_ids.shape[1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=doc_ids.device).tril()
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal  # [B, L, L]
    # Counting what a token sees (itself included) gives its position within its document.
    position_ids = allowed.sum(dim=-1) - 1
    return allowed[:, None], position_ids


def _tap(hidden_states, layer_ids) -> torch.Tensor:
    # HF: index 0 is the embedding output, so layer i lives at i + 1.
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


def _cut_at_eos(tokens: list[int], eos_token_id: int | None) -> list[int]:
    if eos_token_id is not None and eos_token_id in tokens:
        return tokens[: tokens.index(eos_token_id) + 1]
    return tokens


def build_target(cfg: TargetConfig, device: torch.device | str) -> TargetModel:
    """Frozen eval-mode target on `device`; deterministic for the embedded model."""
    return TargetModel(_build_hf_model(cfg, device))
