"""The run's models: the frozen target on each target device and one drafter objective per
drafter thread, each on its thread's device; and the CPU drafter `export` rebuilds from a
checkpoint."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from dflash.config import RunConfig
from dflash.devices import DevicePlan
from dflash.drafter import DFlashDrafter, resolve_layer_ids, resolve_mask_token_id
from dflash.objective import DFlashObjective
from dflash.target import TargetModel, build_target


@dataclass(kw_only=True, slots=True)
class Models:
    targets: dict[torch.device, TargetModel]
    objectives: list[DFlashObjective]
    """One per drafter thread (replica), each on its thread's device."""
    layer_ids: tuple[int, ...]
    vocab_size: int
    context_dim: int


def build_models(cfg: RunConfig, plan: DevicePlan) -> Models:
    targets = {dev: build_target(cfg.target, dev) for dev in plan.target_devices()}
    first = targets[plan.target[0]]
    layer_ids = resolve_layer_ids(cfg.drafter, first.num_layers)
    mask_id = resolve_mask_token_id(cfg.drafter, first.vocab_size)
    base = DFlashDrafter(
        cfg.drafter,
        hidden_size=first.hidden_size,
        num_target_layers=first.num_layers,
        vocab_size=first.vocab_size,
        layer_ids=layer_ids,
    )
    # The frozen embedding and LM head are the target's; one read-only copy per drafter device.
    heads = {
        dev: (copy.deepcopy(first.embed_tokens).to(dev), copy.deepcopy(first.lm_head).to(dev))
        for dev in plan.drafter_devices()
    }
    objectives = [
        DFlashObjective(
            copy.deepcopy(base).to(dev),
            *heads[dev],
            cfg.drafter.block_size,
            mask_id,
            cfg.drafter.resolved_gamma(),
            cfg.drafter.attention,
            cfg.train.precision,
        )
        for dev in plan.drafter
    ]
    return Models(
        targets=targets,
        objectives=objectives,
        layer_ids=layer_ids,
        vocab_size=first.vocab_size,
        context_dim=len(layer_ids) * first.hidden_size,
    )


def target_dims(cfg: RunConfig) -> tuple[int, int, int]:
    """(hidden_size, num_layers, vocab_size) of the configured target, without loading weights."""
    if cfg.target.path is None:
        return cfg.target.hidden_size, cfg.target.num_layers, cfg.target.vocab_size
    # transformers takes seconds to import: a synthetic target does without it
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(cfg.target.path, local_files_only=True)
    hf = getattr(hf, "text_config", hf)
    return hf.hidden_size, hf.num_hidden_layers, hf.vocab_size


def build_export_drafter(cfg: RunConfig, state: dict) -> DFlashDrafter:
    """A CPU drafter with the checkpointed weights (for `python -m dflash export`)."""
    hidden, layers, vocab = target_dims(cfg)
    drafter = DFlashDrafter(
        cfg.drafter,
        hidden_size=hidden,
        num_target_layers=layers,
        vocab_size=vocab,
        layer_ids=resolve_layer_ids(cfg.drafter, layers),
    )
    drafter.load_state_dict(state)
    return drafter
