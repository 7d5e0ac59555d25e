"""The DFlash drafter: fused target context injected as K/V into Qwen3-style layers.

Structure follows z-lab/dflash `dflash/model.py` (`DFlashDraftModel`), written in plain torch so
it compiles cleanly and does not depend on transformers internals (5.17 on the GPU host vs 5.24
here differ). Parameter names match the z-lab checkpoint layout (`fc`, `hidden_norm`, `norm`,
`layers.N.self_attn.{q,k,v,o}_proj`, `q_norm`, `k_norm`, `mlp.{gate,up,down}_proj`,
`input_layernorm`, `post_attention_layernorm`) so `export.py` writes the state dict as is.

Data flow of one forward (shapes: B batch, S context rows, Q block rows, H hidden, k taps):
  context [B, S, k*H] -> fc -> hidden_norm -> ctx [B, S, H]   (shared by every layer)
  x = block embeddings [B, Q, H]
  per layer: Q from x only; K, V = the SAME k/v projections over [ctx ; x] (KV injection);
             per-head q/k RMSNorm; RoPE at absolute positions (queries use the last Q rows)
  final RMSNorm -> [B, Q, H]; the caller applies the frozen target LM head.

Layers are full_attention or sliding_attention (`layer_types`, as in DFlash checkpoints). A sliding
layer sees only keys whose position is within `sliding_window - 1` of the query's, both ways: what
z-lab's inference gets from flash-attn (non-causal, window_size (w-1, w-1), bottom-right aligned,
transformers `_flash_attention_forward`), so the block stays bidirectional as long as the window
holds it. Training ANDs the same rule into the anchor-block mask (masks.py).

The embedding and LM head are NOT parameters here: they belong to the target (frozen, shared).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from dflash.config import DrafterConfig
from harness.runtime.errors import ConfigError

FULL, SLIDING = "full_attention", "sliding_attention"

try:  # flex_attention is the CUDA training path; CPU uses the dense SDPA mask.
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - torch >= 2.5 always has it
    BlockMask, flex_attention = None, None


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """DFlash rule (z-lab `build_target_layer_ids`): one draft layer taps the middle target
    layer; otherwise `num_draft_layers` ids spread uniformly (rounded) over layers 1..N-3.
    Qwen3-8B (36 layers), 5 draft layers -> (1, 9, 17, 25, 33)."""
    if num_draft_layers < 1 or num_target_layers < 1:
        raise ConfigError("num_target_layers and num_draft_layers must be >= 1")
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    if end < start:
        raise ConfigError(
            f"a {num_target_layers}-layer target is too shallow for the uniform 1..N-3 rule; "
            "set drafter.target_layer_ids"
        )
    span = end - start
    return tuple(int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers))


def resolve_layer_ids(cfg: DrafterConfig, num_target_layers: int) -> tuple[int, ...]:
    """cfg.target_layer_ids when set (validated), else the DFlash rule."""
    ids = cfg.target_layer_ids or build_target_layer_ids(num_target_layers, cfg.num_layers)
    if not all(0 <= i < num_target_layers for i in ids):
        raise ConfigError(f"drafter.target_layer_ids {ids} out of range for {num_target_layers} layers")
    return tuple(ids)


def resolve_mask_token_id(cfg: DrafterConfig, vocab_size: int) -> int:
    """cfg.mask_token_id, else the last target id; must be a row of the target embedding
    (Model-Optimizer DFlash doc: the drafter ships no embedding of its own)."""
    mid = vocab_size - 1 if cfg.mask_token_id is None else cfg.mask_token_id
    if not 0 < mid < vocab_size:
        raise ConfigError(f"drafter.mask_token_id {mid} not in the target vocabulary [1, {vocab_size})")
    return mid


class DenseMask(NamedTuple):
    """SDPA form of the anchor-block mask. `allowed` [B,1,Q,KV] bool; `row_valid` [B,1,Q,1]
    marks query rows that see at least one key (padded blocks see nothing)."""

    allowed: torch.Tensor
    row_valid: torch.Tensor


def in_window(q_pos: torch.Tensor, kv_pos: torch.Tensor, window: int) -> torch.Tensor:
    """Whether a key at kv_pos lies in the sliding window of a query at q_pos (tensor ops only:
    it runs inside mask_mods, under vmap and broadcasting)."""
    return (q_pos - kv_pos < window) & (kv_pos - q_pos < window)


def window_mask(positions: torch.Tensor, q_len: int, window: int) -> DenseMask:
    """DenseMask of a sliding layer at inference: positions [B, KV] of the keys, the queries are
    the last q_len of them."""
    allowed = in_window(positions[:, None, -q_len:, None], positions[:, None, None, :], window)
    return DenseMask(allowed=allowed, row_valid=allowed.any(dim=-1, keepdim=True))


class RMSNorm(nn.Module):
    """Qwen3RMSNorm semantics: normalise in float32, cast back, then scale."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos, sin [B, T, head_dim] for integer positions [B, T] (HF default rope)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # [B, T, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, heads, T, D]; cos/sin: [B, T, D]
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """q [B,h,Q,D], k/v [B,g,KV,D] -> [B,h,Q,D] under mask None | DenseMask | BlockMask."""
    if BlockMask is not None and isinstance(mask, BlockMask):
        return flex_attention(q, k, v, block_mask=mask, enable_gqa=True)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # explicit GQA expansion: portable across SDPA kernels and torch versions
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    if mask is None:  # inference: the block sees all context and itself (z-lab, no mask)
        return F.scaled_dot_product_attention(q, k, v)
    # A fully masked row makes SDPA softmax over all -inf -> NaN (and NaN grads). Let such rows
    # attend everywhere, then zero them: finite values, zero gradient through them.
    safe = mask.allowed | ~mask.row_valid
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=safe)
    return out * mask.row_valid.to(out.dtype)


class DraftAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig, hidden_size: int, layer_type: str = FULL) -> None:
        super().__init__()
        d = cfg.head_dim
        self.sliding_window = cfg.sliding_window if layer_type == SLIDING else None
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(hidden_size, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(hidden_size, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(hidden_size, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, hidden_size, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x, ctx, cos, sin, mask) -> torch.Tensor:
        # x: [B, Q, H] block rows; ctx: [B, S, H] fused context; cos/sin: [B, S+Q, D]
        b, q_len, _ = x.shape
        kv_in = torch.cat([ctx, x], dim=1)  # KV injection: same projections over both
        kv_len = kv_in.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(kv_in).view(b, kv_len, self.num_kv_heads, self.head_dim))
        k = k.transpose(1, 2)
        v = self.v_proj(kv_in).view(b, kv_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        # Queries take the last Q rows of the position table (z-lab apply_rotary_pos_emb).
        q = _apply_rope(q, cos[:, -q_len:], sin[:, -q_len:])
        k = _apply_rope(k, cos, sin)
        # Under autocast v is the projection's bf16 while the fp32 norm weights and rope table
        # promote q and k to fp32; flex_attention needs one dtype. A no-op without autocast.
        q, k = q.to(v.dtype), k.to(v.dtype)
        out = attend(q, k, v, mask)  # [B, heads, Q, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class DraftMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, hidden_size: int, layer_type: str = FULL) -> None:
        super().__init__()
        self.self_attn = DraftAttention(cfg, hidden_size, layer_type)
        self.mlp = DraftMLP(hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(hidden_size, cfg.rms_norm_eps)

    def forward(self, x, ctx, cos, sin, mask) -> torch.Tensor:
        # The fused context is not re-normed per layer (z-lab Qwen3DFlashDecoderLayer).
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """fc + hidden_norm context fusion, `cfg.num_layers` KV-injection layers, final norm."""

    def __init__(
        self,
        cfg: DrafterConfig,
        *,
        hidden_size: int,
        num_target_layers: int,
        vocab_size: int,
        layer_ids: tuple[int, ...] | list[int],
    ) -> None:
        super().__init__()
        if cfg.num_heads % cfg.num_kv_heads:
            raise ConfigError("drafter.num_heads must be a multiple of drafter.num_kv_heads")
        if cfg.head_dim % 2:
            raise ConfigError("drafter.head_dim must be even (rotary embedding)")
        self.cfg = cfg
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.num_target_layers = num_target_layers
        self.layer_ids = tuple(int(i) for i in layer_ids)
        self.fc = nn.Linear(len(self.layer_ids) * hidden_size, hidden_size, bias=False)
        self.hidden_norm = RMSNorm(hidden_size, cfg.rms_norm_eps)
        self.layer_types = tuple(cfg.layer_types or (FULL,) * cfg.num_layers)
        self.sliding_window = cfg.sliding_window if SLIDING in self.layer_types else None
        self.layers = nn.ModuleList(DraftLayer(cfg, hidden_size, t) for t in self.layer_types)
        self.norm = RMSNorm(hidden_size, cfg.rms_norm_eps)
        self.reset_parameters(cfg.init_seed)

    def reset_parameters(self, seed: int) -> None:
        """HF-style init (normal std 0.02 for linears, ones for norms), deterministic in seed
        and independent of the global RNG (forked), so replicas start identical."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    w = torch.empty(mod.weight.shape, dtype=torch.float32).normal_(0.0, 0.02)
                    with torch.no_grad():
                        mod.weight.copy_(w)
                elif isinstance(mod, RMSNorm):
                    nn.init.ones_(mod.weight)

    def forward(
        self, block_hidden: torch.Tensor, context: torch.Tensor, positions: torch.Tensor, mask=None
    ) -> torch.Tensor:
        """block_hidden [B,Q,H] (embedded block tokens), context [B,S,k*H] (tapped target
        states), positions [B,S+Q] (absolute: context rows then block rows), mask None |
        DenseMask | BlockMask over (Q, S+Q), or a dict of them by layer type (training a drafter
        with sliding layers). None = inference: full layers see everything, sliding layers their
        window. Returns normed hidden states [B,Q,H]."""
        dtype = self.fc.weight.dtype
        ctx = self.hidden_norm(self.fc(context.to(dtype)))  # [B, S, H]
        x = block_hidden.to(dtype)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, dtype)
        for layer, layer_mask in zip(self.layers, self._layer_masks(mask, positions, x.shape[1])):
            x = layer(x, ctx, cos, sin, layer_mask)
        return self.norm(x)

    def _layer_masks(self, mask, positions: torch.Tensor, q_len: int) -> list:
        if isinstance(mask, dict):
            return [mask[t] for t in self.layer_types]
        if mask is None:
            window = window_mask(positions, q_len, self.sliding_window) if self.sliding_window is not None else None
            return [window if t == SLIDING else None for t in self.layer_types]
        if self.sliding_window is not None:
            # One training mask for every layer would silently drop the window.
            raise ValueError("a drafter with sliding_attention layers takes its masks by layer type")
        return [mask] * len(self.layers)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
