"""A Ray cluster of two nodes on loopback for the tests of `--backend ray` (a head and one more
node, one CPU each: `ray.cluster_utils.Cluster`), started once per test module (the `cluster` fixture). Without Ray the
tests that use it skip with the reason; CI installs it (`.ci/setup`: the `ray` extra)."""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="needs Ray: pip install '.[ray]'")

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray then gives its nodes the loopback address instead of the host's interface (read when ray is
imported: set before the cluster starts, and inherited by the drivers the tests start)."""


def start_cluster():
    """The two nodes, for the `cluster` fixture (tests/conftest.py); the caller shuts them down."""
    from ray.cluster_utils import Cluster  # deferred: the tests that need no cluster run without Ray

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20})
    nodes.add_node(num_cpus=1, object_store_memory=80 * 2**20)
    return nodes


def kill_worker_of(pid: int) -> None:
    """SIGKILL the Ray worker that started process `pid` (its parent, read from /proc): what a
    node's loss looks like to the driver."""
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(parent, signal.SIGKILL)
