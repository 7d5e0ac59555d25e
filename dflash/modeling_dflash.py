"""DFlash draft model for `AutoModel.from_pretrained(path, trust_remote_code=True)`.

`dflash.export` copies this file into every export folder and points config.json's `auto_map` at
its two classes. It runs where only torch and transformers are installed, so it imports nothing of
the trainer, and it uses only transformers' stable surface (`PreTrainedModel`, `Qwen3Config`): the
attention, norms and rotary table are written out here, with the trainer drafter's operations in
the trainer's order (dflash/drafter.py), so an export computes what was trained, bit for bit on
CPU in float32.

The model is z-lab/dflash's `DFlashDraftModel` (dflash/model.py, MIT): same parameter names,
config fields and forward signature (`position_ids`, `noise_embedding`, `target_hidden`,
`past_key_values`, `use_cache`; returns the normed hidden states of the block rows, to which the
caller applies the target's LM head), so z-lab's `dflash_generate` drives it. Block queries see
every context row and every block row; a `sliding_attention` layer (config `layer_types`,
`sliding_window`) only keys whose position is within sliding_window - 1 of the query's, both ways,
as flash-attn's non-causal window does for z-lab's model (with a cache, key positions are taken as
contiguous and ending at the last query's, flash-attn's bottom-right alignment). With SDPA or
eager kernels z-lab's model drops that window; this one applies it with any kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, Qwen3Config

FULL, SLIDING = "full_attention", "sliding_attention"


class DFlashConfig(Qwen3Config):
    """Qwen3Config read from a DFlash config.json; `block_size`, `num_target_layers` and
    `dflash_config` ride along as extra attributes. model_type stays qwen3, as in z-lab exports."""


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's default taps, used only when dflash_config has no target_layer_ids."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def rope_theta_of(config) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"this DFlash model supports the default rotary embedding, not {rope['rope_type']!r}")
    return float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos, sin [B, T, head_dim] for integer positions [B, T]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


def window_mask(q_pos: torch.Tensor, kv_pos: torch.Tensor, window: int) -> torch.Tensor:
    """bool [B, 1, Q, KV]: keys within window - 1 positions of the query, either side."""
    q, kv = q_pos[:, None, :, None], kv_pos[:, None, None, :]
    return (q - kv < window) & (kv - q < window)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """q [B,h,Q,D], k/v [B,g,KV,D]; mask None, bool [B,1,Q,KV] or an additive float mask."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    if mask is None or mask.dtype != torch.bool:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # A row that sees no key would softmax over all -inf (NaN): let it see everything, then zero it.
    row_valid = mask.any(dim=-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_valid)
    return out * row_valid.to(out.dtype)


class DFlashRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


class DFlashAttention(nn.Module):
    """Q from the block rows; K, V from [context ; block rows] with the same projections."""

    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, d
        bias = config.attention_bias
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=bias)
        self.q_norm = DFlashRMSNorm(d, config.rms_norm_eps)
        self.k_norm = DFlashRMSNorm(d, config.rms_norm_eps)
        sliding = config.layer_types[layer_idx] == SLIDING
        self.sliding_window = config.sliding_window if sliding else None

    def forward(self, x, ctx, cos, sin, position_ids, mask, past_key_values=None) -> torch.Tensor:
        b, q_len, _ = x.shape
        kv_in = torch.cat([ctx, x], dim=1)
        n = kv_in.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(kv_in).view(b, n, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(kv_in).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = _apply_rope(q, cos[:, -q_len:], sin[:, -q_len:])
        k = _apply_rope(k, cos, sin)
        q, k = q.to(v.dtype), k.to(v.dtype)  # autocast: one dtype for the attention kernel
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        if mask is None and self.sliding_window is not None:
            kv_len = k.shape[2]
            kv_pos = position_ids
            if position_ids.shape[1] != kv_len:  # cached keys: contiguous, ending at the last query
                kv_pos = position_ids[:, -1:] - kv_len + 1 + torch.arange(kv_len, device=x.device)
            mask = window_mask(position_ids[:, -q_len:], kv_pos, self.sliding_window)
        out = attend(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class DFlashMLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = DFlashMLP(config)
        self.input_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = DFlashRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, ctx, cos, sin, position_ids, mask, past_key_values=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos, sin, position_ids, mask, past_key_values)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(PreTrainedModel):
    config_class = DFlashConfig
    base_model_prefix = "dflash"
    _no_split_modules = ["DFlashDecoderLayer"]

    def __init__(self, config) -> None:
        super().__init__(config)
        dflash = getattr(config, "dflash_config", None) or {}
        self.target_layer_ids = list(
            dflash.get("target_layer_ids") or build_target_layer_ids(config.num_target_layers, config.num_hidden_layers)
        )
        self.mask_token_id = dflash.get("mask_token_id")
        self.block_size = config.block_size
        self.layer_types = list(config.layer_types or [FULL] * config.num_hidden_layers)
        if len(self.layer_types) != config.num_hidden_layers or not set(self.layer_types) <= {FULL, SLIDING}:
            raise ValueError(
                f"layer_types must give full_attention or sliding_attention per layer, got {self.layer_types}"
            )
        if SLIDING in self.layer_types and not config.sliding_window:
            raise ValueError("sliding_attention layers need sliding_window (and use_sliding_window true)")
        self.rope_theta = rope_theta_of(config)
        h = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = DFlashRMSNorm(h, config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = DFlashRMSNorm(h, config.rms_norm_eps)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, DFlashRMSNorm):
            module.weight.data.fill_(1.0)

    def forward(
        self,
        position_ids: torch.LongTensor,
        attention_mask=None,
        noise_embedding: torch.Tensor | None = None,
        target_hidden: torch.Tensor | None = None,
        past_key_values=None,
        use_cache: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        """noise_embedding [B,Q,H] (target-embedded block tokens), target_hidden [B,S,k*H] (tapped
        target states of the context rows), position_ids [B,S+Q] (context rows, then block rows);
        attention_mask None, a bool [B,1,Q,KV] allow-mask, or a dict of them by layer type.
        Returns the normed hidden states [B,Q,H]."""
        dtype = self.fc.weight.dtype
        ctx = self.hidden_norm(self.fc(target_hidden.to(dtype)))
        x = noise_embedding.to(dtype)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.rope_theta, dtype)
        for layer_type, layer in zip(self.layer_types, self.layers):
            mask = attention_mask[layer_type] if isinstance(attention_mask, dict) else attention_mask
            x = layer(x, ctx, cos, sin, position_ids, mask, past_key_values)
        return self.norm(x)
