"""A matrix's trials as Ray tasks: `harness matrix --backend ray [--address ADDR]` farms them over
the nodes of a Ray cluster, for campaigns one machine cannot hold (the seeds' 8-GPU topology, or
thousands of trials).

Everything but where a trial runs stays the local pool's (`pool.WorkerPool`): the same order, stop
rules, --max-time and --finish-by, live lines, store and trial ids; only its `run_fn` is
`RayBackend.run`, and Ray, not `GpuSlots`, decides which GPUs a trial gets.

- One trial is one task: `num_cpus` its workload's `cpus`, `num_gpus` its GPU share (`gpu_share`),
  `max_retries=0` (a crash is never silently retried). The task (`run_remote`) runs the trial
  through the same runner as the local pool (`run_trial`: own process group, hang detection and
  py-spy dumps, native stacks) in a temporary folder on its node, and returns the record and the
  folder zipped; the driver unpacks the folder into the store's folder for that trial id and the
  pool appends the record, as it appends a local one. The trainer's `run/` (checkpoints, nothing
  reads them) stays behind.
- A task that returns nothing (its worker or node died, `ray.cancel`) stores nothing: the pool
  goes on, and a resumed run runs that trial again (`local.TrialNotRun`); a task that raised (a
  harness bug on the node) stops the matrix, as a worker exception does locally.
- The code travels as the job's working directory (the checkout without its data: `EXCLUDES`, and
  what .gitignore ignores); each node needs the project's dependencies (torch above all) installed.
  The record's `host`, `torch_version`, `python` and `gpu` say where each trial ran.
- A task may wait in Ray's queue for resources, so each carries the wall-clock time after which it
  must not start (--max-time, --finish-by less its cell's median); one that starts later returns
  at once, counted as left by the clock.
- The driver's death ends the job: Ray kills its workers, and each worker's trial reaper
  (harness.trial.lifeline) kills the trials it was running.

Ray is an optional extra (`pip install '.[ray]'`); it is imported only here, inside functions.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness.args import UsageError
from harness.campaign.local import TrialNotRun, with_run_dir
from harness.stores.zips import RUN_DIR
from harness.trial.folder import RESULT
from harness.trial.outcome import TrialResult
from harness.trial.runner import Judge, run_trial
from harness.trial.spec import REPO_ROOT, TrialSpec

EXCLUDES = ["results/", "runs/", "docs/", ".git/", ".venv/", ".cache/", "__pycache__/", "*.pyc", ".whl/", ".gl/"]
"""Left out of the working directory a job ships to its nodes: stores and logs are data, not code
(results/ alone is most of the checkout)."""
CONNECT_TIMEOUT_S = 10.0
"""How long the head's port may take to accept a connection before the address counts as wrong."""
MISSING = "--backend ray needs Ray, an optional extra: pip install '.[ray]' (or pip install ray)"


def require() -> None:
    """UsageError (one line, exit 2) when Ray is not installed."""
    try:
        import ray  # noqa: F401  (deferred: an optional extra, and a second to import)
    except ImportError:
        raise UsageError(MISSING) from None


def gpu_share(gpus: int, slots: int, per_gpu: int) -> float:
    """A trial's `num_gpus`: one GPU's share `slots / per_gpu` when it needs one GPU (Ray packs
    `per_gpu` such trials on a GPU, as GpuSlots does), else that many whole GPUs (Ray hands out
    fractions only below one GPU). Rounded down to Ray's 1e-4 so that per_gpu shares fit."""
    if gpus <= 0:
        return 0.0
    if gpus > 1:
        return float(gpus)
    return math.floor(min(slots, per_gpu) / per_gpu * 1e4) / 1e4


def check_reachable(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """UsageError when a `HOST:PORT` address does not accept a connection: Ray itself retries an
    unreachable one for many minutes before it gives up (2.60, seen here with a wrong port)."""
    if not address or address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--address {address!r}: expected the head's HOST:PORT, or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise UsageError(f"cannot reach a Ray cluster at {address}: {e.strerror or e}") from None


@dataclass(frozen=True, slots=True)
class Need:
    cpus: int
    gpus: float


def run_remote(trial: TrialSpec, folder: str, not_after: float | None, judge: Judge | None = None) -> dict[str, Any]:
    """The task on a worker node: the trial through the runner in a temporary folder named
    `folder`; returns {"record": ..., "zip": bytes}, or {"late": True} without running it when it
    starts after `not_after` (seconds since the epoch)."""
    if not_after is not None and time.time() > not_after:
        return {"late": True}
    if trial.cwd is not None and not Path(trial.cwd).is_dir():
        return {"missing": f"node {socket.gethostname()} has no folder {trial.cwd}"}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:  # Ray's choice of GPUs, kept in the stored spec.json as the local pool's is
        trial.env = {**trial.env, "CUDA_VISIBLE_DEVICES": visible}
    with tempfile.TemporaryDirectory(prefix="harness-trial-") as tmp:
        out = Path(tmp) / folder
        result = run_trial(with_run_dir(trial, out), out, judge=judge)
        return {"record": result.to_json(), "zip": zip_folder(out)}


def zip_folder(folder: Path) -> bytes:
    """The trial folder's files (the trainer's run/ left out), deflated, in memory."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if path.is_file() and not path.is_symlink() and rel.parts[0] != RUN_DIR:
                z.write(path, rel.as_posix())
    return buf.getvalue()


def land(value: dict[str, Any], artefacts: Path) -> TrialResult:
    """A task's record and files into the store's folder `artefacts` (emptied first: a folder
    without a record is a trial that was lost or interrupted); the record then points at it, as a
    local trial's does."""
    record = TrialResult.from_json(value["record"])
    for child in artefacts.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    with zipfile.ZipFile(io.BytesIO(value["zip"])) as z:
        for name in z.namelist():
            if name.startswith("/") or ".." in Path(name).parts:
                raise RuntimeError(f"{record.trial_id}: the task returned a file outside its folder: {name!r}")
        z.extractall(artefacts)
    record.artefacts = str(artefacts)
    (artefacts / RESULT).write_text(json.dumps(record.to_json(), indent=2) + "\n")
    return record


class RayBackend:
    """The Ray cluster a matrix runs on: `run` is the pool's run_fn, `kill_running` its kill switch.

    Connects on construction: to `address` (the head's `HOST:PORT`, or `auto`: this machine must be
    a node of the cluster, whose raylet the driver attaches to), else to RAY_ADDRESS or the cluster
    `ray start` left on this machine, else a new local one."""

    def __init__(self, address: str | None = None, *, stream: TextIO | None = None) -> None:
        require()
        if not (REPO_ROOT / "pyproject.toml").is_file() or not (REPO_ROOT / "repro").is_dir():
            # The job ships the folder the harness runs from; an installed copy is not a checkout.
            raise UsageError(
                f"--backend ray ships the checkout the harness runs from, and {REPO_ROOT} is not one "
                "(run from a checkout, installed with pip install -e)"
            )
        check_reachable(address or os.environ.get("RAY_ADDRESS"))
        import ray  # deferred: an optional extra, and a second to import

        self._ray = ray
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._in_flight: set[Any] = set()
        self._need: dict[str, Need] = {}
        self._not_after: dict[str, float | None] = {}
        # Ray's core installs a C++ handler that dies on SIGTERM; the CLI's own handler kills the
        # trials in flight and leaves them for resume (exit 143), as with the local pool.
        main = threading.current_thread() is threading.main_thread()
        on_term = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(
                address=address,
                runtime_env={"working_dir": str(REPO_ROOT), "excludes": EXCLUDES},
                logging_level=logging.ERROR,
                log_to_driver=False,
            )
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UsageError(
                f"cannot start or reach a Ray cluster at {address or 'RAY_ADDRESS or a new local one'}: {_brief(e)}"
            ) from None
        finally:
            if callable(on_term):
                signal.signal(signal.SIGTERM, on_term)
        # A plain function, wrapped here: the module has no Ray at import time.
        self._task = ray.remote(run_remote)
        total = ray.cluster_resources()
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        self._stream.write(
            f"Ray cluster at {ray.get_runtime_context().gcs_address}: {nodes} node(s), "
            f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs\n"
        )

    def workers(self) -> int:
        """Trials in flight by default: the cluster's CPUs (each trial takes at least one)."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def plan(
        self,
        needs: dict[str, tuple[int, int, int]],
        per_gpu: int,
        *,
        max_time_s: float | None,
        finish_by_s: float | None,
        expected_s: dict[str, float | None],
    ) -> list[str]:
        """Per cell its resources (`needs`: cpus, GPUs, slots) and its start-by time; returns one
        warning line per cell that no node of the cluster can hold (its trials wait for one)."""
        now = time.time()
        for cell, (cpus, gpus, slots) in needs.items():
            self._need[cell] = Need(cpus=cpus, gpus=gpu_share(gpus, slots, per_gpu))
            limits = [now + max_time_s] if max_time_s is not None else []
            if finish_by_s is not None and expected_s.get(cell) is not None:
                limits.append(now + finish_by_s - expected_s[cell])
            self._not_after[cell] = min(limits) if limits else None
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]
        warnings = []
        for cell, need in self._need.items():
            if not any(r.get("CPU", 0) >= need.cpus and r.get("GPU", 0) >= need.gpus for r in nodes):
                warnings.append(
                    f"{cell}: no node of the Ray cluster has {need.cpus} CPU(s) and {need.gpus:g} GPU(s); "
                    "its trials wait until one joins"
                )
        return warnings

    def run(self, trial: TrialSpec, artefacts: Path, judge: Judge | None = None) -> TrialResult:
        """One trial as a task; its record once its files are in `artefacts`. TrialNotRun when the
        task gave no record back (lost, cancelled, or started too late)."""
        ray = self._ray
        need = self._need.get(trial.cell, Need(cpus=1, gpus=0.0))
        ref = self._task.options(
            num_cpus=need.cpus, num_gpus=need.gpus, max_retries=0, name=f"trial {trial.trial_id}"
        ).remote(trial, artefacts.name, self._not_after.get(trial.cell), judge)
        with self._lock:
            self._in_flight.add(ref)
        try:
            value = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            # The task itself raised: a harness bug on the node, surfaced as a local one is.
            raise RuntimeError(f"{trial.trial_id}: the task failed on its node: {_brief(e, last=True)}") from None
        except (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.LocalRayletDiedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.TaskCancelledError,
            ray.exceptions.OutOfMemoryError,
        ) as e:
            raise TrialNotRun(f"{type(e).__name__}: {_brief(e)}") from None
        finally:
            with self._lock:
                self._in_flight.discard(ref)
        if value.get("late"):
            raise TrialNotRun("it reached a node after --max-time or --finish-by", late=True)
        if value.get("missing"):
            raise UsageError(
                f"{value['missing']}: a command runs in the same folder on every node "
                "(a shared file system, or the same checkout at the same path)"
            )
        return land(value, artefacts)

    def kill_running(self) -> int:
        """Cancel every task in flight, killing its worker (whose reaper kills the trial)."""
        with self._lock:
            refs = list(self._in_flight)
        for ref in refs:
            self._ray.cancel(ref, force=True)
        return len(refs)

    def close(self) -> None:
        self._ray.shutdown()


def _brief(e: BaseException, *, last: bool = False) -> str:
    """One line of Ray's message: the first, or the last (a task's traceback ends with its error)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if last else lines[0]) if lines else type(e).__name__
