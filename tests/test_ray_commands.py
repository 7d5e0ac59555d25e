"""`harness stress` and `harness hunt` with `--backend ray`: the runs farmed over a Ray cluster of
two nodes (tests/ray_cluster.py) fill the same kind of folder as local runs, and `diagnose` and
hunt read the same verdicts from both; a run whose worker dies is said and rerun by the same
command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_cluster import kill_worker_of, needs_ray
from test_lifeline import alive

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SUITE = "tests/hunt_suite"
pytestmark = [pytest.mark.ray, pytest.mark.slow, needs_ray]

# The hunt's part of tests/hunt_suite whose verdicts do not hang on a race's luck: one test that
# fails the same way in every run and with one thread, one that passes.
STEADY = ("-k", "deterministic or clean")


def _harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _verdicts(report: dict) -> dict[str, tuple]:
    return {
        t["id"]: (t["verdict"], t["failed"], t["runs"], t["one_thread"], tuple(t["races"])) for t in report["tests"]
    }


def test_a_hunt_on_two_nodes_gives_the_local_verdicts(tmp_path, cluster):
    args = ("hunt", "--json", "--runs", "2", "--threads", "2")
    local = _harness(*args, "-o", str(tmp_path / "local"), "--", SUITE, *STEADY)
    ray = _harness(
        *args, "--backend", "ray", "--address", cluster.address, "-o", str(tmp_path / "ray"), "--", SUITE, *STEADY
    )
    assert (local.returncode, ray.returncode) == (0, 0), ray.stderr[-3000:]
    mine, theirs = json.loads(local.stdout), json.loads(ray.stdout)
    assert _verdicts(theirs) == _verdicts(mine) and len(_verdicts(mine)) == 2
    assert "Ray cluster at" in ray.stderr and "2 node(s)" in ray.stderr
    for folder in ("run-0", "run-1", "rerun-1-thread"):  # the runs' files came back from the nodes
        assert (tmp_path / "ray" / folder / "junit.xml").is_file(), folder
    # The folder alone, through diagnose, reads as the local one does.
    again = _harness("diagnose", "--json", str(tmp_path / "ray"))
    assert _verdicts(json.loads(again.stdout)) == _verdicts(mine)


def test_stress_on_two_nodes_counts_and_names_as_local_runs(tmp_path, cluster):
    program = tmp_path / "dies.py"
    program.write_text(
        "import threading\n"
        "def work():\n"
        "    raise ValueError('bad item 7')\n"
        "t = threading.Thread(target=work, name='loader'); t.start(); t.join()\n"
    )
    args = ("stress", "-p", "2", "--max-runs", "3", "--keep-going")
    local = _harness(*args, "-o", str(tmp_path / "local"), "--", "python", str(program))
    ray = _harness(
        *args,
        "--backend",
        "ray",
        "--address",
        cluster.address,
        "-o",
        str(tmp_path / "ray"),
        "--",
        "python",
        str(program),
    )
    assert (local.returncode, ray.returncode) == (1, 1), ray.stderr[-3000:]
    assert "3 runs completed, 3 failures" in local.stdout and "3 runs completed, 3 failures" in ray.stdout
    for out in ("local", "ray"):
        assert sorted(p.name for p in (tmp_path / out).iterdir() if p.is_dir()) == ["0", "1", "2"]
    said = [json.loads(_harness("diagnose", "--json", str(tmp_path / out)).stdout) for out in ("local", "ray")]
    assert _diagnosis(said[1]) == _diagnosis(said[0])


def _diagnosis(report: dict) -> list[tuple]:
    return sorted(
        (f.get("race"), f.get("count"), f.get("outcome")) for f in report.get("findings", report.get("diagnosis", []))
    )


SLOW_TEST = """
import os, time

def test_waits_a_while():
    open(os.path.join({pids!r}, str(os.getpid())), "w").close()
    time.sleep(4)
"""


def test_a_run_whose_worker_dies_is_said_and_the_same_command_completes_the_hunt(tmp_path, cluster):
    pids = tmp_path / "pids"
    pids.mkdir()
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_slow.py").write_text(SLOW_TEST.format(pids=str(pids)))
    hunt = ["hunt", "--runs", "2", "--threads", "1", "--backend", "ray", "--address", cluster.address]
    where = ["-o", str(tmp_path / "hunt"), "--", str(suite)]
    first = subprocess.Popen(
        [PY, "-m", "harness", *hunt, *where], cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not list(pids.iterdir()):
            assert time.monotonic() < deadline, "no run started"
            time.sleep(0.05)
        victim = int(next(pids.iterdir()).name)  # the run's pytest
        kill_worker_of(victim)
        _, err = first.communicate(timeout=180)
    finally:
        first.kill()
        first.wait(timeout=30)
    assert not alive(victim)
    assert "lost, not recorded" in err and "rerun the same command" in err, err[-3000:]
    again = _harness(*hunt, "--json", *where)
    assert again.returncode == 0, again.stderr[-3000:]
    (test,) = json.loads(again.stdout)["tests"]
    assert test["runs"] == 2 and test["verdict"] == "ok", test
