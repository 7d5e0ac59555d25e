"""Shared test configuration: the `race` marker, CUDA skips with a reason, and thread hygiene.

Thread hygiene follows CPython's threading_helper: a test that leaves a non-daemon thread alive
fails, because a leaked pipeline thread is exactly the kind of bug this project hunts.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import ray_cluster

LEAK_GRACE_S = 5.0


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    for item in items:
        # Everything under tests/race/ belongs to the race suite (`pytest -k race` / `-m race`).
        if "/race/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.race)
        if item.get_closest_marker("cuda") and not _has_cuda():
            item.add_marker(pytest.mark.skip(reason="needs CUDA (run on the GPU host, see README)"))


@pytest.fixture(params=[False, True], ids=["no-bytecode", "writes-bytecode"])
def torch_bytecode_written(request, monkeypatch, tmp_path):
    """Whether Python may write bytecode, torch having none cached (an empty PYTHONPYCACHEPREFIX):
    with False, every process compiles torch's modules again, as on an image that ships no .pyc."""
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path))
    if request.param:
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    else:
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    return request.param


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"test leaked threads: {[t.name for t in leaked]}"


def pytest_terminal_summary(terminalreporter):
    # After any race test: the rows checked against this torch's own record and those with none.
    ran = any(
        "race" in getattr(r, "keywords", {})
        for reports in terminalreporter.stats.values()
        for r in reports
        if hasattr(r, "keywords")
    )
    if ran:
        from tests.race.conftest import coverage_lines
        from tests.race.racecheck import torch_version

        for line in coverage_lines(torch_version()):
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of two nodes on loopback, one CPU each (tests/ray_cluster.py)."""
    saved = {k: os.environ.get(k) for k in ray_cluster.LOOPBACK}
    os.environ.update(ray_cluster.LOOPBACK)
    nodes = ray_cluster.start_cluster()
    try:
        yield nodes
    finally:
        nodes.shutdown()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture
def fault_env(monkeypatch):
    """Sets the trainer's in-process fault plan (HARNESS_FAULTS) for one test, cleared after it."""
    from harness.runtime import failpoints

    def install(spec: str) -> None:
        monkeypatch.setenv(failpoints.ENV_PLAN, spec)

    yield install
    failpoints.clear()
