"""Atomic training checkpoints: drafter, optimizer and schedule state, step, data position, config.

Layout under `<out_dir>/checkpoints/`: one folder per save, `step-0000012/` holding `state.pt`
(tensors; loaded with `weights_only=True`) and `meta.json` (step, data position, config), plus a
`LATEST` file naming the newest folder. A save writes a temp folder, fsyncs every file and the
folder, renames it into place, and only then replaces `LATEST` (tmp + `os.replace`), so a crash
at any moment leaves the previous checkpoint intact and readable. The newest `KEEP` are kept.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from dataclasses import dataclass

import torch

from harness.runtime.errors import UserInputError

KEEP = 2
LATEST = "LATEST"
STATE_FILE = "state.pt"
META_FILE = "meta.json"


class CheckpointError(UserInputError):
    """No usable checkpoint where one was expected (resume/export): exit 2."""


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    step: int
    """Optimizer steps done."""
    data_seq: int
    """Next global batch seq to train on (= step * num_drafter_threads)."""
    config: dict
    drafter: dict
    optimizer: dict
    scheduler: dict
    path: str = ""


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(out_dir: str, ckpt: Checkpoint) -> str:
    """Write `ckpt` atomically under `out_dir/checkpoints`; returns the checkpoint folder."""
    root = os.path.join(out_dir, "checkpoints")
    os.makedirs(root, exist_ok=True)
    name = f"step-{ckpt.step:07d}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    state = {"drafter": ckpt.drafter, "optimizer": ckpt.optimizer, "scheduler": ckpt.scheduler}
    torch.save(state, os.path.join(tmp, STATE_FILE))
    meta = {"step": ckpt.step, "data_seq": ckpt.data_seq, "config": ckpt.config}
    with open(os.path.join(tmp, META_FILE), "w") as f:
        json.dump(meta, f, indent=1)
    for fname in (STATE_FILE, META_FILE):
        _fsync_file(os.path.join(tmp, fname))
    _fsync_dir(tmp)
    _rename_over(tmp, final)
    _write_latest(root, name)
    _prune(root, keep_name=name)
    return final


def _rename_over(tmp: str, final: str, attempts: int = 3) -> None:
    """rename(tmp, final), replacing an existing `final` (a re-save of the same step, or another
    process that shares the out_dir and saved the same step a moment earlier)."""
    for attempt in range(attempts):
        shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
            return
        except OSError:  # ENOTEMPTY/EEXIST: someone renamed into `final` between the two calls
            if attempt == attempts - 1:
                raise


def _write_latest(root: str, name: str) -> None:
    tmp = os.path.join(root, f".{LATEST}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, LATEST))
    _fsync_dir(root)


def _prune(root: str, keep_name: str) -> None:
    names = sorted(n for n in os.listdir(root) if n.startswith("step-"))
    for n in names[:-KEEP]:
        if n != keep_name:
            shutil.rmtree(os.path.join(root, n), ignore_errors=True)


def find(path: str) -> str | None:
    """Resolve a run dir, a checkpoints dir or a step dir to a step dir; None if absent."""
    if os.path.isfile(os.path.join(path, META_FILE)):
        return path
    for root in (os.path.join(path, "checkpoints"), path):
        latest = os.path.join(root, LATEST)
        if os.path.isfile(latest):
            with open(latest) as f:
                name = f.read().strip()
            step_dir = os.path.join(root, name)
            if os.path.isfile(os.path.join(step_dir, META_FILE)):
                return step_dir
    return None


def load(path: str, map_location: str | torch.device = "cpu") -> Checkpoint:
    step_dir = find(path)
    if step_dir is None:
        raise CheckpointError(f"no checkpoint found at {path!r}")
    try:
        with open(os.path.join(step_dir, META_FILE)) as f:
            meta = json.load(f)
        state = torch.load(os.path.join(step_dir, STATE_FILE), map_location=map_location, weights_only=True)
    except (OSError, ValueError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError) as e:
        raise CheckpointError(f"unreadable checkpoint {step_dir!r}: {e}") from None
    return Checkpoint(
        step=int(meta["step"]),
        data_seq=int(meta["data_seq"]),
        config=meta["config"],
        drafter=state["drafter"],
        optimizer=state["optimizer"],
        scheduler=state["scheduler"],
        path=step_dir,
    )
