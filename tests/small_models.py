"""The drafter objective the model tests build over a target: the drafter a `DrafterConfig`
describes, trained through the target's frozen embedding and LM head, as `dflash.models` does for
each drafter thread."""

from __future__ import annotations

from dflash.config import DrafterConfig
from dflash.drafter import DFlashDrafter, resolve_layer_ids, resolve_mask_token_id
from dflash.objective import DFlashObjective
from dflash.target import TargetModel


def objective_for(cfg: DrafterConfig, target: TargetModel, attention: str = "auto", precision: str = "fp32"):
    drafter = DFlashDrafter(
        cfg,
        hidden_size=target.hidden_size,
        num_target_layers=target.num_layers,
        vocab_size=target.vocab_size,
        layer_ids=resolve_layer_ids(cfg, target.num_layers),
    )
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
