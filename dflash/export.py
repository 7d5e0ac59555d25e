"""Export the drafter in the z-lab HF layout (config.json + model.safetensors + modelling file).

Layout as in the z-lab/dflash checkpoints (`DFlashDraftModel`, Qwen3 config fields plus
`block_size`, `num_target_layers`, `dflash_config{mask_token_id, target_layer_ids}`,
`layer_types`, and `sliding_window` with `use_sliding_window` when a layer slides: Qwen3Config
drops sliding_window unless use_sliding_window is true). Weights hold only the drafter (fc,
hidden_norm, layers, norm): the embedding and LM head are the target's
(sgl-project/SpecForge#604: serving reads mask_token_id from dflash_config, so it must match
training). `modeling_dflash.py` (dflash/modeling_dflash.py, torch + transformers only) goes into
the folder and `auto_map` names its classes, so `AutoModel.from_pretrained(path,
trust_remote_code=True)` builds the draft model; without them AutoModel builds a plain Qwen3Model
and drops fc and hidden_norm.

Atomicity: everything is written into a temporary directory next to `out_dir` and renamed into
place; an existing `out_dir` is moved aside first and removed after the rename, so a failed export
never leaves a half-written directory under the final name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import torch
from safetensors.torch import load_file, save_file

from dflash.config import DrafterConfig, RunConfig
from dflash.drafter import DFlashDrafter, resolve_mask_token_id
from harness.runtime.errors import UserInputError

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODELING_NAME = "modeling_dflash.py"
MODELING_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), MODELING_NAME)
AUTO_MAP = {"AutoConfig": "modeling_dflash.DFlashConfig", "AutoModel": "modeling_dflash.DFlashDraftModel"}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def hf_config(drafter: DFlashDrafter, *, block_size: int, mask_token_id: int) -> dict:
    """The z-lab `config.json` dictionary for this drafter."""
    c = drafter.cfg
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": dict(AUTO_MAP),
        "model_type": "qwen3",
        "block_size": block_size,
        "num_target_layers": drafter.num_target_layers,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": list(drafter.layer_ids)},
        "layer_types": list(drafter.layer_types),
        "sliding_window": drafter.sliding_window,
        "use_sliding_window": drafter.sliding_window is not None,
        "hidden_size": drafter.hidden_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"},
        "vocab_size": drafter.vocab_size,
        "tie_word_embeddings": False,
        "dtype": DTYPE_NAMES.get(drafter.fc.weight.dtype, str(drafter.fc.weight.dtype)),
    }


def _write_dir(tmp: str, config: dict, state: dict[str, torch.Tensor]) -> None:
    cfg_path = os.path.join(tmp, CONFIG_NAME)
    with open(cfg_path, "w", encoding="ascii") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    save_file(state, os.path.join(tmp, WEIGHTS_NAME), metadata={"format": "pt"})
    shutil.copyfile(MODELING_SOURCE, os.path.join(tmp, MODELING_NAME))


def _replace_dir(tmp: str, out_dir: str) -> None:
    old = None
    if os.path.lexists(out_dir):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=os.path.dirname(out_dir))
        os.replace(out_dir, os.path.join(old, "prev"))
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_hf(drafter: DFlashDrafter, cfg: RunConfig, out_dir: str) -> str:
    """Write `out_dir` (z-lab layout) atomically; returns its absolute path."""
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserInputError(f"export target {out_dir} exists and is not a directory")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    config = hf_config(
        drafter, block_size=cfg.drafter.block_size, mask_token_id=resolve_mask_token_id(cfg.drafter, drafter.vocab_size)
    )
    # Owned CPU copies: safetensors rejects shared or non-contiguous storage.
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in drafter.state_dict().items()}
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.tmp-", dir=parent)
    try:
        _write_dir(tmp, config, state)
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def load_hf(path: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict, drafter state dict) from an export directory."""
    cfg_path, w_path = os.path.join(path, CONFIG_NAME), os.path.join(path, WEIGHTS_NAME)
    if not (os.path.isfile(cfg_path) and os.path.isfile(w_path)):
        raise UserInputError(f"{path} is not a DFlash export ({CONFIG_NAME} + {WEIGHTS_NAME})")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
        state = load_file(w_path)
    except (ValueError, OSError, RuntimeError) as exc:  # SafetensorError subclasses Exception only
        raise UserInputError(f"{path}: unreadable export: {exc}") from None
    except Exception as exc:
        if type(exc).__name__ != "SafetensorError":
            raise
        raise UserInputError(f"{path}: corrupt {WEIGHTS_NAME}: {exc}") from None
    return config, state


def drafter_from_hf(path: str) -> DFlashDrafter:
    """Rebuild a DFlashDrafter from an export (weights loaded strictly)."""
    config, state = load_hf(path)
    values = dict(
        num_layers=config["num_hidden_layers"],
        block_size=config["block_size"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        intermediate_size=config["intermediate_size"],
        rms_norm_eps=config["rms_norm_eps"],
        rope_theta=config["rope_theta"],
        mask_token_id=config["dflash_config"]["mask_token_id"],
        target_layer_ids=tuple(config["dflash_config"]["target_layer_ids"]),
        layer_types=tuple(config["layer_types"]),
        sliding_window=config.get("sliding_window") if config.get("use_sliding_window") else None,
    )
    dcfg = DrafterConfig(**values)
    drafter = DFlashDrafter(
        dcfg,
        hidden_size=config["hidden_size"],
        num_target_layers=config["num_target_layers"],
        vocab_size=config["vocab_size"],
        layer_ids=dcfg.target_layer_ids,
    )
    drafter.to(next(iter(state.values())).dtype)
    drafter.load_state_dict(state, strict=True)
    return drafter
