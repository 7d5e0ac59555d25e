"""The embedded Llama target in plain torch: transformers' LlamaForCausalLM, weight for weight.

transformers' import alone took 8.8-13.1 s of a GPU host's start (results/h100-2026-12-05-startup),
most of a short run's time outside training; this module builds the same seeded model without it.
It keeps transformers' module names (its state dict loads into LlamaForCausalLM and back), draws
its seeded init in transformers' order (constructor draws, then the base model's normal(0, 0.02),
then the LM head's: the shipped corpora stay this target's output), and answers the part of the
HF interface dflash.target uses: `config`, `base_model`, the embeddings, a forward with
`attention_mask` (2D padding or 4D bool), `position_ids`, `past_key_values` and
`output_hidden_states`, whose last hidden state is the final-normed one as in HF.

It has none of transformers' output capture: the capture race under another thread's compile
(transformers#44614, `target-hook-taps`) cannot happen here, so the harness's workloads that study
it keep `target.impl=transformers`. tests/test_llama.py checks the weights and the outputs against
transformers on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# transformers' LlamaRMSNorm and rotate_half are the drafter's (Qwen3's): one copy of each.
from dflash.drafter import RMSNorm, rotate_half

INIT_STD = 0.02
"""transformers' `initializer_range` default: the std of every seeded linear and embedding."""


@dataclass(kw_only=True, frozen=True, slots=True)
class LlamaShape:
    """The numbers that make the model, under transformers' config names."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    pad_token_id: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(slots=True)
class Output:
    """What a forward returns; `get(name)` as on transformers' ModelOutput."""

    logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    past_key_values: KVCache | None = None

    def get(self, name: str):
        return getattr(self, name, None)


class KVCache:
    """Keys and values per layer, grown by each forward that is given it."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def get_seq_length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        """Keep the first `length` positions (after a rejected draft suffix)."""
        self.keys = [None if k is None else k[:, :, :length] for k in self.keys]
        self.values = [None if v is None else v[:, :, :length] for v in self.values]


class Rotary(nn.Module):
    """cos and sin of the rotary embedding per position, computed in float32."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        dim = shape.head_dim
        inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape, layer: int) -> None:
        super().__init__()
        h, d = shape.hidden_size, shape.head_dim
        self.layer, self.heads, self.kv_heads, self.head_dim = (
            layer,
            shape.num_attention_heads,
            shape.num_key_value_heads,
            d,
        )
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)

    def forward(self, x, rope, mask, cache: KVCache | None) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = (t[:, None] for t in rope)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        causal = mask is None and n > 1 and k.shape[2] == n
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, shape: LlamaShape, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(shape, layer)
        self.mlp = MLP(shape)
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)

    def forward(self, x, rope, mask, cache: KVCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


def _attention_mask(mask: torch.Tensor | None, q_len: int, past: int, device) -> torch.Tensor | None:
    """A bool [B, 1, q, k] mask (True = attend) from a 2D padding mask; 4D passes as given."""
    if mask is not None and mask.dim() == 4:
        return mask.bool()
    if mask is None and (past == 0 or q_len == 1):
        return None  # causal alone: SDPA's is_causal, or one new token that sees everything
    k_len = past + q_len
    causal = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=past)
    return causal[None, None] if mask is None else causal[None, None] & mask.bool()[:, None, None, :k_len]


class LlamaModel(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.config = shape
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size, shape.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(shape, i) for i in range(shape.num_hidden_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.rotary_emb = Rotary(shape)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
        output_hidden_states: bool = False,
    ) -> Output:
        cache = (past_key_values or KVCache(len(self.layers))) if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        n = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past, past + n, device=input_ids.device)[None]
        x = self.embed_tokens(input_ids)
        rope = self.rotary_emb(x, position_ids)
        mask = _attention_mask(attention_mask, n, past, x.device)
        states = [x]
        for layer in self.layers:
            x = layer(x, rope, mask, cache)
            states.append(x)
        x = self.norm(x)
        states[-1] = x  # as transformers: the last hidden state is the normed one
        return Output(
            last_hidden_state=x, hidden_states=tuple(states) if output_hidden_states else None, past_key_values=cache
        )


class LlamaForCausalLM(nn.Module):
    """The seeded model: `LlamaForCausalLM(shape)` under `torch.manual_seed(s)` is transformers'
    `LlamaForCausalLM(config)` under the same seed."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.config = shape
        self.model = LlamaModel(shape)
        self._init_base()
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
        with torch.no_grad():
            self.lm_head.weight.normal_(0.0, INIT_STD)

    @torch.no_grad()
    def _init_base(self) -> None:
        # transformers' post_init of the base model, in its module order; the head comes after.
        base = self.model
        base.embed_tokens.weight.normal_(0.0, INIT_STD)
        base.embed_tokens.weight[self.config.pad_token_id].zero_()
        for layer in base.layers:
            a, m = layer.self_attn, layer.mlp
            for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
                lin.weight.normal_(0.0, INIT_STD)

    @property
    def base_model(self) -> LlamaModel:
        return self.model

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, **kwargs) -> Output:
        out = self.model(input_ids, **kwargs)
        out.logits = self.lm_head(out.last_hidden_state)
        return out
