"""The small trainer run the subprocess and in-process trainer tests share: its config, its
command line, and how a test starts it as its own process."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading

from dflash.config import DataConfig, DrafterConfig, PipelineConfig, RunConfig, TargetConfig, TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_DIR = os.path.join(REPO, ".cache", "dflash-test")


def small_config(out_dir: str, **train_kw) -> RunConfig:
    """A run small enough for unit tests; the synthetic corpus is cached across tests."""
    train_args = dict(
        steps=4, lr=3e-3, out_dir=str(out_dir), eval_prompts=0, export=False, progress=False, log_interval_s=1000.0
    )
    train_args.update(train_kw)
    return RunConfig(
        preset="test-small",
        data=DataConfig(
            cache_dir=CACHE_DIR,
            synthetic_samples=96,
            synthetic_min_len=16,
            synthetic_max_len=48,
            bucket_boundaries=(24, 48),
            token_budget=192,
            min_loss_tokens=4,
            heldout_samples=8,
        ),
        target=TargetConfig(
            hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, vocab_size=64
        ),
        drafter=DrafterConfig(
            num_layers=1, block_size=4, num_anchors=4, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64
        ),
        pipeline=PipelineConfig(
            num_prefetch_threads=2, num_target_threads=2, num_drafter_threads=2, poll_s=0.02, shutdown_deadline_s=8.0
        ),
        train=TrainConfig(**train_args),
    )


def small_cli_args(out_dir: str) -> list[str]:
    """`--set` flags that turn the default preset into small_config (for subprocess tests)."""
    cfg = small_config(out_dir)
    args = ["--out", str(out_dir)]
    for section in ("data", "target", "drafter", "pipeline"):
        for field in dataclasses.fields(getattr(cfg, section)):
            value = getattr(getattr(cfg, section), field.name)
            if value is None:
                continue
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            args += ["--set", f"{section}.{field.name}={text}"]
    for key in ("steps", "eval_prompts", "export", "progress", "log_interval_s"):
        args += ["--set", f"train.{key}={getattr(cfg.train, key)}"]
    return args


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dflash-")]


def train_argv(run_dir, *sets: str) -> list[str]:
    """`python -m dflash train` on the small run in `run_dir`, with more `--set` values."""
    extra = [arg for value in sets for arg in ("--set", value)]
    return [sys.executable, "-m", "dflash", "train", *small_cli_args(str(run_dir)), *extra]


def start_trainer(argv: list[str], cwd, env: dict[str, str]) -> subprocess.Popen:
    """The trainer as its own process group, its stdout and stderr read by the test."""
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def end_of_run(deadline_s: float = 10.0) -> None:
    """What a test does after an in-process run: the fault plan cleared, the stage threads joined."""
    from harness.runtime import failpoints

    failpoints.clear()
    for t in threading.enumerate():
        if t.name.startswith("dflash-"):
            t.join(deadline_s)
