"""The DFlash training objective: anchors + context in, weighted block loss out.

`DFlashObjective.forward` is the function the drafter step compiles. All N blocks of all rows go
through ONE drafter forward (Q_LEN = N*B_s, KV_LEN = S + N*B_s, SpecForge `OnlineDFlashModel`):
  block tokens  [token[a], MASK x (B_s-1)] embedded with the frozen target embedding
  positions     context rows 0..S-1, block rows a..a+B_s-1
  mask          anchor-block mask (masks.py): dense SDPA form, or a flex BlockMask built INSIDE
                the forward from the anchor tensors (no per-step recompile; see masks.py); one
                per layer kind present (full, sliding window); with doc_ids [B, L] (packed
                rows) blocks see only their anchor's document, and score only its labels
  logits        frozen target LM head on block rows 1..B_s-1
Positions stay absolute within a packed row: RoPE scores depend only on position differences,
and attention never crosses a document, so per-document positions would change nothing.
`precision="bf16-autocast"` runs the drafter and the LM head under torch.autocast(bfloat16); the
parameters stay float32 (master weights) and the loss is float32.
Anchors are sampled outside (anchors.py) with a generator seeded by (train.seed, batch.seq), so
the result does not depend on which thread took the batch.

The embedding and LM head are submodules for device placement but are frozen here
(requires_grad False); an optimizer over `objective.drafter.parameters()` (or over parameters
with requires_grad) never sees them.
"""

from __future__ import annotations

import torch
from torch import nn

from dflash.config import ATTENTION_BACKENDS, PRECISIONS
from dflash.drafter import FULL, SLIDING, DenseMask, DFlashDrafter, window_mask
from dflash.loss import LossOut, block_labels, block_loss, position_weights
from dflash.masks import flex_block_mask, sdpa_mask
from harness.runtime.errors import ConfigError


class DFlashObjective(nn.Module):
    def __init__(
        self,
        drafter: DFlashDrafter,
        embed: nn.Embedding,
        lm_head: nn.Linear,
        block_size: int,
        mask_token_id: int,
        gamma: float,
        attention: str = "auto",
        precision: str = "fp32",
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_BACKENDS:
            raise ConfigError(f"attention must be one of {ATTENTION_BACKENDS}, got {attention!r}")
        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if not 0 <= mask_token_id < embed.num_embeddings:
            raise ConfigError(f"mask_token_id {mask_token_id} is not a row of the target embedding")
        if block_size < 2:
            raise ConfigError(f"block_size must be >= 2, got {block_size}")
        self.drafter = drafter
        self.embed = embed.requires_grad_(False)
        self.lm_head = lm_head.requires_grad_(False)
        self.block_size = block_size
        self.mask_token_id = mask_token_id
        self.attention = attention
        self.precision = precision
        # On the drafter's device: a CPU buffer beside CUDA activations fails the first compiled
        # step on a GPU ("Tensor on device cpu is not on the expected device cuda:0"), and
        # draft_logits takes its device from this buffer.
        self.register_buffer(
            "pos_weights", position_weights(block_size, gamma, device=embed.weight.device), persistent=False
        )

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return self.drafter.layer_ids

    def _use_flex(self, device: torch.device) -> bool:
        if self.attention != "auto":
            return self.attention == "flex"
        # auto: flex only when compiled on CUDA. Eager flex is an unfused reference that
        # materialises the scores, and flex has no backward on CPU (NotImplementedError).
        return device.type == "cuda" and torch.compiler.is_compiling()

    def _block_inputs(self, input_ids: torch.Tensor, anchors: torch.Tensor):
        """(block token ids [B, N*B_s], positions [B, S + N*B_s])."""
        b, seq_len = input_ids.shape
        offs = torch.arange(self.block_size, device=input_ids.device)
        first = input_ids.gather(1, anchors)  # [B, N]
        ids = torch.where(offs == 0, first[:, :, None], self.mask_token_id)  # [B, N, B_s]
        block_pos = (anchors[:, :, None] + offs).flatten(1)
        ctx_pos = torch.arange(seq_len, device=input_ids.device).expand(b, seq_len)
        return ids.flatten(1), torch.cat([ctx_pos, block_pos], dim=1)

    def _masks(self, anchors: torch.Tensor, keep: torch.Tensor, seq_len: int, doc_ids: torch.Tensor | None, flex: bool):
        """One mask for an all-full drafter, else one per layer kind (a dict by layer type)."""
        build = flex_block_mask if flex else sdpa_mask
        kinds = sorted(set(self.drafter.layer_types))
        masks = {
            kind: build(
                anchors,
                keep,
                self.block_size,
                seq_len,
                doc_ids,
                self.drafter.sliding_window if kind == SLIDING else None,
            )
            for kind in kinds
        }
        return masks if SLIDING in masks else masks[kinds[0]]

    def _autocast(self, device: torch.device):
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16-autocast")

    def forward(
        self,
        input_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        context: torch.Tensor,
        anchors: torch.Tensor,
        keep: torch.Tensor,
        doc_ids: torch.Tensor | None = None,
    ) -> LossOut:
        """input_ids/loss_mask [B, L], context [B, L, k*H], anchors/keep [B, N], doc_ids None or
        [B, L] (document of each token of a packed row) -> LossOut."""
        b, seq_len = input_ids.shape
        num_anchors = anchors.shape[1]
        block_ids, positions = self._block_inputs(input_ids, anchors)
        mask = self._masks(anchors, keep, seq_len, doc_ids, self._use_flex(input_ids.device))
        with self._autocast(input_ids.device):
            hidden = self.drafter(self.embed(block_ids), context, positions, mask)  # [B, N*B_s, H]
            hidden = hidden.view(b, num_anchors, self.block_size, -1)[:, :, 1:]
            logits = self.lm_head(hidden.to(self.lm_head.weight.dtype))  # [B, N, B_s-1, V]
        labels, valid = block_labels(input_ids, loss_mask, anchors, keep, self.block_size, doc_ids)
        return block_loss(logits, labels, valid, self.pos_weights)

    @torch.no_grad()
    def draft_logits(
        self, context: torch.Tensor, anchor_tokens: torch.Tensor, context_lens: list[int] | None = None
    ) -> torch.Tensor:
        """Inference draft of one block per row: context [b, S, k*H] holds the verified
        positions 0..S-1, the anchor (last verified token) sits at position S. The block sees all
        context and itself (no mask, as at z-lab inference). Returns logits [b, B_s-1, V].

        `context_lens`: rows of different lengths in one batch (the evaluation's lockstep): row r's
        context is its first context_lens[r] rows, its anchor sits at that position, and a mask
        hides the padding after it from the block."""
        dev = self.pos_weights.device  # the target may live on another device
        context, anchor_tokens = context.to(dev), anchor_tokens.to(dev)
        b, seq_len = context.shape[:2]
        offs = torch.arange(self.block_size, device=dev)
        ids = torch.where(offs == 0, anchor_tokens[:, None], self.mask_token_id)  # [b, B_s]
        positions = torch.arange(seq_len + self.block_size, device=dev).expand(b, -1)
        mask = None
        if context_lens is not None:
            lens = torch.tensor(context_lens, device=dev)[:, None]  # [b, 1]
            col = torch.arange(seq_len + self.block_size, device=dev)[None, :]
            # Context columns past the row's own length are padding; the block's columns sit at
            # positions len..len+B_s-1.
            positions = torch.where(col < seq_len, col, lens + col - seq_len)
            seen = (col < lens) | (col >= seq_len)  # [b, S+B_s]
            allowed = seen[:, None, None, :].expand(b, 1, self.block_size, -1)
            valid = torch.ones(b, 1, self.block_size, 1, dtype=torch.bool, device=dev)
            mask = DenseMask(allowed=allowed, row_valid=valid)
            if self.drafter.sliding_window is not None:  # sliding layers: the padding and the window
                window = window_mask(positions, self.block_size, self.drafter.sliding_window)
                mask = {FULL: mask, SLIDING: DenseMask(allowed=allowed & window.allowed, row_valid=valid)}
        with self._autocast(dev):
            hidden = self.drafter(self.embed(ids), context, positions, mask)
            return self.lm_head(hidden[:, 1:].to(self.lm_head.weight.dtype))
