"""The drafter objective the model tests build over a target, and how they train it: the drafter
a `DrafterConfig` describes, trained through the target's frozen embedding and LM head, as
`dflash.models` does for each drafter thread."""

from __future__ import annotations

import torch

from dflash.config import DrafterConfig
from dflash.drafter import DFlashDrafter, resolve_layer_ids, resolve_mask_token_id
from dflash.objective import DFlashObjective
from dflash.target import TargetModel


def drafter_for(cfg: DrafterConfig, target: TargetModel) -> DFlashDrafter:
    return DFlashDrafter(
        cfg,
        hidden_size=target.hidden_size,
        num_target_layers=target.num_layers,
        vocab_size=target.vocab_size,
        layer_ids=resolve_layer_ids(cfg, target.num_layers),
    )


def objective_for(cfg: DrafterConfig, target: TargetModel, attention: str = "auto", precision: str = "fp32"):
    drafter = drafter_for(cfg, target)
    mask_id = resolve_mask_token_id(cfg, target.vocab_size)
    return DFlashObjective(
        drafter,
        target.embed_tokens,
        target.lm_head,
        cfg.block_size,
        mask_id,
        cfg.resolved_gamma(),
        attention,
        precision,
    )


def train_on(step, objective: DFlashObjective, batch: tuple, steps: int, after_backward=None) -> list[float]:
    """`steps` AdamW steps of `step` (the objective, or its compiled form) on one batch, the
    drafter's parameters trained; `after_backward()` runs between backward and the step. The losses."""
    opt = torch.optim.AdamW(objective.drafter.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = step(*batch)
        out.loss.backward()
        if after_backward is not None:
            after_backward()
        opt.step()
        losses.append(out.loss.item())
    return losses
