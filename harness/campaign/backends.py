"""Where the runs of matrix, stress and hunt execute: this host's processes, or Ray tasks on a
cluster's nodes (`--backend ray [--address ADDR]`, harness.campaign.ray_backend).

An engine takes a `Backend` and calls its `run(spec, folder)` for each run, as the runner's
`run_trial` is called locally: the run's files land in `folder` either way, and the same record
comes back, so that a folder reads the same whichever backend filled it. A run the backend lost
(its node died) raises `TrialNotRun`: the engine records nothing for it and says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.args import UsageError
from harness.campaign import ray_backend
from harness.campaign.local import TrialNotRun, run_local
from harness.campaign.loop import kill_child_groups
from harness.trial.outcome import TrialResult

__all__ = ["Backend", "TrialNotRun", "add_arguments", "from_args", "local"]


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    run: Callable[..., TrialResult]
    """`run(spec, folder, judge=None)`: the runner's `run_trial`, here or on a node."""
    kill_running: Callable[[], int]
    """Ends every run in flight (Ctrl-C); returns how many."""
    close: Callable[[], None] = field(default=lambda: None)
    cpus: int | None = None
    """The cluster's CPUs (a Ray backend): the default of runs at once."""


def local() -> Backend:
    return Backend(name="local", run=run_local, kill_running=kill_child_groups)


def add_arguments(p: argparse.ArgumentParser, runs: str) -> None:
    """--backend and --address; `runs` names what one task runs (trials, runs of CMD)."""
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help=f"where {runs} run: this host's processes (default), or Ray tasks on a cluster's nodes "
        "(the optional extra: pip install '.[ray]'; docs/operations.md)",
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="with --backend ray: the cluster this machine is a node of (the head's HOST:PORT, or auto; "
        f"default RAY_ADDRESS, else a new local cluster); {runs} at once default to the cluster's CPUs",
    )


def from_args(a: argparse.Namespace) -> Backend:
    """The backend the command line asks for; bad input (no Ray, an unreachable address) is one line."""
    if getattr(a, "backend", "local") != "ray":
        if getattr(a, "address", None) is not None:
            raise UsageError("--address needs --backend ray")
        return local()
    ray = ray_backend.RayBackend(a.address)
    return Backend(name="ray", run=ray.run, kill_running=ray.kill_running, close=ray.close, cpus=ray.workers())
