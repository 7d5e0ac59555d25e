"""Atomic training checkpoints: drafter, optimizer and schedule state, step, data position, config.

Layout under `<out_dir>/checkpoints/`: one folder per save, `step-0000012/` holding `state.pt`
(tensors; loaded with `weights_only=True`) and `meta.json` (step, data position, config), plus a
`LATEST` file naming the newest folder. A save writes a temp folder, fsyncs every file and the
folder, renames it into place, and only then replaces `LATEST` (tmp + `os.replace`), so a crash
at any moment leaves the previous checkpoint intact and readable. The newest `KEEP` are kept.

`RunCheckpoints` is a run's side of it: the checkpoint to resume from, and the saves of the
replica group's state during and at the end of the run (one against a deadline after a signal).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import threading
import time
from dataclasses import dataclass
from typing import TextIO

import torch

from dflash.config import RunConfig
from harness.runtime.errors import ConfigError, UserInputError

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


def resume_state(cfg: RunConfig, err: TextIO) -> Checkpoint | None:
    """The checkpoint train.resume continues from; None to start at step 0. ConfigError when it was
    written with another number of drafter threads."""
    if not cfg.train.resume:
        return None
    if find(cfg.train.out_dir) is None:
        print(f"resume: no checkpoint under {cfg.train.out_dir}, starting at step 0", file=err)
        return None
    ck = load(cfg.train.out_dir)
    num_rep = cfg.pipeline.num_drafter_threads
    if ck.data_seq != ck.step * num_rep:
        # The data position is step * M: another M would silently train on other batches.
        raise ConfigError(
            f"checkpoint {ck.path} was written with {ck.data_seq // max(ck.step, 1)} "
            f"drafter threads; resume needs pipeline.num_drafter_threads to match "
            f"(got {num_rep})"
        )
    return ck


class RunCheckpoints:
    """Saves of one run's replica group (dflash.replicas.ReplicaGroup) under train.out_dir."""

    def __init__(self, cfg: RunConfig, group) -> None:
        self.cfg = cfg
        self.group = group

    def save(self, step: int, state: dict | None = None) -> str:
        """Write the checkpoint of `step` from the replica group's `state` (read now if None)."""
        st = self.group.state() if state is None else state
        return save(
            self.cfg.train.out_dir,
            Checkpoint(
                step=step,
                data_seq=step * self.group.num_replicas,
                config=self.cfg.to_dict(),
                drafter=st["drafter"],
                optimizer=st["optimizer"],
                scheduler=st["scheduler"],
            ),
        )

    def save_by(self, deadline: float) -> tuple[str | None, str | None]:
        """(path, why not): checkpoint from a helper thread, waited for until `deadline`
        (time.monotonic()): a save that cannot finish (a device that no longer answers) must not
        keep the process alive; saves are atomic, so one abandoned midway leaves the previous one."""
        box: dict[str, object] = {}

        def body() -> None:
            try:
                got = self.group.state_when_idle(deadline - time.monotonic())
                if got is None:
                    box["why"] = "the replica leader is stuck inside an optimizer update"
                    return
                box["path"] = self.save(*got)
            except Exception as e:  # noqa: BLE001  reported; the run is ending either way
                box["why"] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=body, name="dflash-checkpoint", daemon=True)
        t.start()
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            return None, "the write did not finish within the shutdown deadline"
        return box.get("path"), box.get("why")  # type: ignore[return-value]
