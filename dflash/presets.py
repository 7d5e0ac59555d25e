"""Named run configurations (functions returning a RunConfig, as torchtitan recipes).

`tiny-cpu` is the embedded default: a random 4-layer target regenerates a small synthetic
corpus, and a 1-layer drafter learns it in well under a minute on 2 CPU cores. The GPU presets
keep the same code path and scale the models, the batches and the thread/device plan, and run
with what REPORT recommends for each: gpu-default and gpu-gpu-bound eager (the fastest clean
configuration measured on each), gpu-launch-bound `reduce-overhead`, all with `fixes=recommended`;
the CPU presets run raw (the CPU is where races are studied, and raw
is what the CPU tests and matrices measure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dflash.config import (
    CompileConfig,
    DataConfig,
    DeviceConfig,
    DrafterConfig,
    PipelineConfig,
    RunConfig,
    TargetConfig,
    TrainConfig,
)
from dflash.seeds import SEEDS
from harness.runtime.errors import ConfigError
from harness.runtime.fixes import RECOMMENDED

DEFAULT_PRESET = "tiny-cpu"


def tiny_cpu() -> RunConfig:
    return RunConfig(
        preset="tiny-cpu",
        data=DataConfig(synthetic_samples=512, bucket_boundaries=(32, 64, 128), token_budget=1024),
        target=TargetConfig(hidden_size=64, num_layers=4, vocab_size=256),
        drafter=DrafterConfig(num_layers=1, block_size=4, num_anchors=8),
        pipeline=PipelineConfig(num_prefetch_threads=1, num_target_threads=1, num_drafter_threads=2),
        # lr 2e-2 x 160 steps: loss 5.2 -> 3.8 and tau ~1.9 on the embedded corpus (2 CPU cores,
        # ~10 s of training; measured with `python -m dflash train`).
        train=TrainConfig(steps=160, lr=2e-2, out_dir="runs/tiny-cpu", eval_prompts=8),
    )


def cpu_compile() -> RunConfig:
    cfg = tiny_cpu()
    return dataclasses.replace(
        cfg,
        preset="cpu-compile",
        compile=CompileConfig(mode="default", backend="inductor"),
        train=dataclasses.replace(cfg.train, out_dir="runs/cpu-compile"),
    )


SEEDS_TOKEN_BUDGET = 43_264
"""dflash.lengths.calibrate_budget(shipped index, the seeds' buckets, 18.3, max_batch_rows=64): the
multiple of 256 whose seed-0 epoch-0 plan of the shipped index averages nearest the seeds' 18.3
samples a batch (tests/test_plan.py recomputes it)."""


def seeds() -> RunConfig:
    """The seeds' batching: their six buckets, a real-length token budget, at most 64 rows a batch.

    Real: the bucket bounds (dflash.seeds, converted to inclusive bounds), the batching rule and
    the row cap. Stand-ins: the token budget (calibrated on the shipped synthetic length index,
    dflash.lengths, since their lengths were not logged) and everything that trains, which is
    tiny-cpu's: its models and its embedded corpus (shared with it, built once). Its samples are
    short, so they all fall in the first bucket and the 64-row cap binds before the budget (as in
    the seeds' first bucket): a CPU run trains on 64 x 769 padded batches, the last of an epoch
    smaller. `python -m dflash plan --preset seeds` plans all six buckets over the shipped index,
    where the budget binds.
    """
    cfg = tiny_cpu()
    return dataclasses.replace(
        cfg,
        preset="seeds",
        data=dataclasses.replace(
            cfg.data,
            bucket_boundaries=SEEDS.bucket_boundaries(),
            token_budget=SEEDS_TOKEN_BUDGET,
            batching="token-budget",
            max_batch_rows=SEEDS.max_batch,
        ),
        # Two epochs of the corpus (4 steps each with 2 drafter threads): every batch pads to
        # 64 x 769 tokens where tiny-cpu's hold its 1,024-token budget, so fewer steps.
        train=dataclasses.replace(cfg.train, steps=8, out_dir="runs/seeds"),
    )


def _gpu(
    name: str,
    *,
    target: TargetConfig,
    drafter: DrafterConfig,
    data: DataConfig,
    pipeline: PipelineConfig,
    devices: DeviceConfig,
    steps: int,
) -> RunConfig:
    return RunConfig(
        preset=name,
        data=data,
        target=target,
        drafter=drafter,
        pipeline=pipeline,
        devices=devices,
        compile=CompileConfig(mode="default", backend="inductor"),
        train=TrainConfig(
            steps=steps, lr=6e-4, out_dir=f"runs/{name}", log_interval_s=10.0, eval_prompts=16, eval_new_tokens=64
        ),
        # The set measured clean for this device kind and compile mode (harness.runtime.fixes.recommended_sets.recommended):
        # raw, gpu-default showed no step after 140 s on one H200 (torch 2.11), three drafter
        # threads compiling at once. `--set fixes=none` (or `fixes=`) runs the raw pipeline.
        fixes=(RECOMMENDED,),
    )


def gpu_default() -> RunConfig:
    """cuda:0, 2 target threads + 3 drafter threads on one GPU, eager drafter, bf16 target."""
    cfg = _gpu(
        "gpu-default",
        target=TargetConfig(
            hidden_size=512,
            num_layers=8,
            num_heads=8,
            num_kv_heads=4,
            intermediate_size=1536,
            vocab_size=4096,
            dtype="bfloat16",
            # transformers' seeded Llama without its 9-13 s import (dflash.llama); the presets built
            # from this one, and the harness's gpu-default workloads, keep transformers' own.
            impl="native",
        ),
        drafter=DrafterConfig(
            num_layers=2, block_size=8, num_anchors=32, num_heads=8, num_kv_heads=4, head_dim=64, intermediate_size=1536
        ),
        # The corpus is regenerated by the target once and cached (data.cache_dir); its size is
        # bounded by that one-time greedy generation, not by training.
        # Coarse prompt quantum + 256 prompts per generate call: ~10 generate calls, not ~100
        # (generation is decode-latency bound; measured minutes for the 768-token corpus at 4/32).
        data=DataConfig(
            synthetic_samples=2048,
            synthetic_min_len=64,
            synthetic_max_len=384,
            synthetic_prompt_quantum=32,
            synthetic_generate_batch=256,
            bucket_boundaries=(128, 256, 384),
            token_budget=8192,
            min_loss_tokens=16,
        ),
        pipeline=PipelineConfig(num_prefetch_threads=2, num_target_threads=2, num_drafter_threads=3),
        devices=DeviceConfig(target_devices=("cuda:0",), drafter_devices=("cuda:0",)),
        steps=300,
    )
    # What REPORT recommends here: eager (one H200, torch 2.11): 0/29 stressed (results/gpu-exposure),
    # 1.06x the cheapest clean compiled set (phase-lock,target-hook-taps, 0/33 in results/gpu-phase)
    # in one 5-round price run, and no compile before the first step. `--set compile.mode=default
    # --set fixes=phase-lock,target-hook-taps` runs that compiled set.
    return dataclasses.replace(cfg, compile=dataclasses.replace(cfg.compile, mode="none"))


def gpu_launch_bound() -> RunConfig:
    """Small drafter and small batches: per-step CPU overhead (launches, Python) dominates."""
    cfg = gpu_default()
    return dataclasses.replace(
        cfg,
        preset="gpu-launch-bound",
        # What REPORT recommends here: reduce-overhead (1.15x the clean configuration without CUDA
        # graphs in a 5-round price), whose `fixes=recommended` is the five-fix set measured clean with it.
        compile=dataclasses.replace(cfg.compile, mode="reduce-overhead"),
        fixes=(RECOMMENDED,),
        target=dataclasses.replace(
            cfg.target, hidden_size=256, num_layers=4, intermediate_size=512, impl="transformers"
        ),
        drafter=dataclasses.replace(
            cfg.drafter,
            num_layers=1,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            intermediate_size=512,
            num_anchors=8,
            block_size=4,
        ),
        data=dataclasses.replace(
            cfg.data,
            synthetic_min_len=24,
            synthetic_max_len=120,
            synthetic_prompt_quantum=8,
            bucket_boundaries=(32, 64, 128),
            token_budget=512,
        ),
        train=dataclasses.replace(cfg.train, steps=600, out_dir="runs/gpu-launch-bound"),
    )


def gpu_gpu_bound() -> RunConfig:
    """Larger target, drafter and batches: kernels dominate, the CPU side is mostly idle."""
    cfg = gpu_default()
    return dataclasses.replace(
        cfg,
        preset="gpu-gpu-bound",
        # REPORT: do not compile here (the clean compiled configuration ran 0.86x eager); eager's
        # `fixes=recommended` is no fix (its campaign cells ran clean).
        compile=dataclasses.replace(cfg.compile, mode="none"),
        target=dataclasses.replace(
            cfg.target,
            hidden_size=1024,
            num_layers=12,
            num_heads=16,
            num_kv_heads=8,
            intermediate_size=3072,
            vocab_size=8192,
            impl="transformers",
        ),
        drafter=dataclasses.replace(
            cfg.drafter,
            num_layers=3,
            block_size=16,
            num_anchors=64,
            num_heads=16,
            num_kv_heads=8,
            head_dim=64,
            intermediate_size=3072,
        ),
        data=dataclasses.replace(
            cfg.data,
            synthetic_samples=1024,
            synthetic_min_len=128,
            synthetic_max_len=768,
            synthetic_prompt_quantum=64,
            bucket_boundaries=(256, 512, 768),
            token_budget=16384,
            min_loss_tokens=32,
        ),
        train=dataclasses.replace(cfg.train, steps=200, out_dir="runs/gpu-gpu-bound"),
        fixes=(RECOMMENDED,),
    )


def gpu_multi() -> RunConfig:
    """5 target GPUs + 3 drafter GPUs (cuda:0..7); remap lets it run on fewer GPUs."""
    cfg = gpu_default()
    return dataclasses.replace(
        cfg,
        preset="gpu-multi",
        # Compiled as before gpu-default went eager: no multi-GPU eager cell has been run.
        compile=dataclasses.replace(cfg.compile, mode="default"),
        target=dataclasses.replace(cfg.target, impl="transformers"),
        pipeline=PipelineConfig(num_prefetch_threads=2, num_target_threads=5, num_drafter_threads=3),
        devices=DeviceConfig(
            target_devices=tuple(f"cuda:{i}" for i in range(5)),
            drafter_devices=("cuda:5", "cuda:6", "cuda:7"),
            remap=True,
        ),
        train=dataclasses.replace(cfg.train, out_dir="runs/gpu-multi"),
        fixes=(RECOMMENDED,),  # phase-lock was measured on one GPU only
    )


PRESETS: dict[str, Callable[[], RunConfig]] = {
    "tiny-cpu": tiny_cpu,
    "cpu-compile": cpu_compile,
    "gpu-default": gpu_default,
    "gpu-launch-bound": gpu_launch_bound,
    "gpu-gpu-bound": gpu_gpu_bound,
    "gpu-multi": gpu_multi,
    "seeds": seeds,
}


def get(name: str) -> RunConfig:
    """A fresh RunConfig for preset `name`; ConfigError listing the known names otherwise."""
    try:
        factory = PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}") from None
    return factory()
