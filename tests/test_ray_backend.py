"""`harness matrix --backend ray`: trials as Ray tasks (harness.campaign.ray_backend).

The cluster tests start a Ray cluster of two nodes on loopback in this process (a head and one
more node, one CPU each: `ray.cluster_utils.Cluster`), run small matrices of `python -c` trials
through it, and hold the records to the local pool's. Without Ray installed they skip with the
reason; CI installs it (`.ci/setup`: the `ray` extra).
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from ray_cluster import kill_worker_of, needs_ray
from test_lifeline import alive, assert_all_gone

from harness.campaign import ray_backend
from harness.campaign.matrix.run import run_matrix
from harness.campaign.matrix.specfile import spec_from_dict
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.spec import TrialSpec, WorkloadSpec

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent


def _cmd(code: str, *args: str, timeout_s: float = 60.0) -> dict:
    return {"kind": "command", "argv": [PY, "-c", code, *args], "timeout_s": timeout_s, "hang_s": timeout_s}


# Waits until `n` trials of its cell run at once (a file each in argv[1]); alone it fails. With one
# CPU per node, two such trials both pass only on two nodes at once.
TOGETHER = (
    "import os, sys, time\n"
    "d = sys.argv[1]; open(os.path.join(d, str(os.getpid())), 'w').close()\n"
    "end = time.monotonic() + 30\n"
    "while len(os.listdir(d)) < 2 and time.monotonic() < end: time.sleep(0.05)\n"
    "sys.exit(0 if len(os.listdir(d)) >= 2 else 1)\n"
)

# Writes its pid to a file named by it in argv[1], then sleeps argv[2] seconds.
SLEEPER = (
    "import os, sys, time\n"
    "p = os.path.join(sys.argv[1], str(os.getpid())); open(p + '.tmp', 'w').write(str(os.getpgid(0)))\n"
    "os.rename(p + '.tmp', p); time.sleep(float(sys.argv[2]))\n"
)


def _matrix(tmp_path: Path, store: str, **over) -> dict:
    together = tmp_path / f"{store}-together"
    together.mkdir()
    d = {
        "name": "t",
        "store": str(tmp_path / store),
        "trials": 2,
        "workers": 2,
        "workloads": {
            "ok": _cmd("print('ok')"),
            "bad": _cmd("import sys; sys.exit(1)"),
            "together": _cmd(TOGETHER, str(together)),
        },
        "groups": [
            {"workloads": ["ok", "bad"], "strategies": ["raw"], "trials": 2},
            {"workloads": ["together"], "strategies": ["raw"], "trials": 2},
        ],
    }
    d.update(over)
    return d


def _lines(store: Path) -> list[dict]:
    return [json.loads(line) for line in (store / "trials.jsonl").read_text().splitlines()]


@pytest.mark.ray
@needs_ray
def test_a_matrix_on_two_ray_nodes_stores_what_the_local_pool_stores(tmp_path, cluster):
    local = run_matrix(spec_from_dict(_matrix(tmp_path, "local")), stream=io.StringIO(), live=False, num_gpus=0)
    backend = ray_backend.RayBackend(cluster.address)
    try:
        remote = run_matrix(spec_from_dict(_matrix(tmp_path, "ray")), stream=io.StringIO(), live=False, backend=backend)
    finally:
        backend.close()
    assert remote.ran == local.ran == 6 and remote.lost == 0
    mine, theirs = _lines(tmp_path / "local"), _lines(tmp_path / "ray")
    assert sorted(r["trial_id"] for r in theirs) == sorted(r["trial_id"] for r in mine)
    assert {tuple(sorted(r)) for r in theirs} == {tuple(sorted(r)) for r in mine}  # same keys
    local_by_id = {r["trial_id"]: r for r in mine}
    for r in theirs:
        twin = local_by_id[r["trial_id"]]
        # `together` passes only when both trials ran at once: on the two nodes (one CPU each).
        assert r["outcome"] == twin["outcome"] == ("crash" if r["cell"] == "bad:raw@-" else "ok"), r
        for key in ("cell", "trial_index", "rc", "signature", "host", "torch_version", "python", "gpu"):
            assert r[key] == twin[key], key
        folder = Path(r["artefacts"])
        assert folder.parent == tmp_path / "ray" / "artefacts"
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in Path(twin["artefacts"]).iterdir())
        assert json.loads((folder / "result.json").read_text()) == r
    assert "ok" in (Path(next(r for r in theirs if r["cell"] == "ok:raw@-")["artefacts"]) / "output.txt").read_text()


def _run_cli(spec: Path, address: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [PY, "-m", "harness", "matrix", "--file", str(spec), "--no-live", "--backend", "ray", "--address", address],
        cwd=REPO,
        text=True,
        **kw,
    )


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout_s:g} s")


def _started(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if not p.name.endswith(".tmp")]


@pytest.mark.ray
@needs_ray
def test_a_killed_driver_then_a_killed_worker_lose_no_trial_and_store_none_twice(tmp_path, cluster):
    """One matrix, three drivers: the first is SIGKILLed mid-matrix (its running trials must die:
    Ray ends the job, each worker's reaper its trial), the second resumes and has a worker killed
    under a trial (nothing stored for it), the third runs just that trial."""
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "name": "t",
                "store": str(tmp_path / "store"),
                "trials": 5,
                "workloads": {"s": _cmd(SLEEPER, str(pids), "1.5")},
            }
        )
    )
    trials = tmp_path / "store" / "trials.jsonl"
    first = _run_cli(spec, cluster.address, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(
            lambda: trials.exists() and trials.read_text().count("\n") >= 2 and len(_started(pids)) >= 4,
            90,
            "two records and two more trials running",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    running = [int(p.name) for p in _started(pids)]
    assert_all_gone(running, [], within_s=10.0)
    before = Store(tmp_path / "store").load()
    assert 2 <= len(before) < 4, "the kill must land mid-matrix"

    second = _run_cli(spec, cluster.address, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait(lambda: len(_started(pids)) > len(running), 90, "a resumed trial started")
        victim = int(next(p for p in _started(pids) if int(p.name) not in running).name)
        kill_worker_of(victim)
        out, err = second.communicate(timeout=120)
    finally:
        second.kill()
        second.wait(timeout=30)
    assert not alive(victim)
    assert second.returncode == 0, err
    assert "not run to the end, nothing stored" in err and "1 lost with their worker or node" in out
    middle = Store(tmp_path / "store").load()
    assert len(middle) == 4 and len({r.trial_id for r in middle}) == 4
    assert all(r.outcome is Outcome.OK for r in middle)

    third = _run_cli(spec, cluster.address, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert "ran 1 trials in" in out and "4 already in" in out
    after = Store(tmp_path / "store").load()
    assert sorted(r.trial_id for r in after) == [f"t/s:raw@-/{i}" for i in range(5)]
    assert [r.to_json() for r in after[: len(before)]] == [r.to_json() for r in before]


# ------------------------------------------------------------------------------ without a cluster


def test_without_ray_the_ray_backend_is_one_error_line_and_exit_2(tmp_path):
    fake = tmp_path / "site" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "t", "store": str(tmp_path / "store"), "workloads": {"ok": _cmd("pass")}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(REPO)])}
    proc = subprocess.run(
        [PY, "-m", "harness", "matrix", "--file", str(spec), "--backend", "ray"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {ray_backend.MISSING}"]
    assert proc.stdout == "" and not (tmp_path / "store").exists()


def test_address_without_the_ray_backend_is_bad_input(tmp_path, capsys):
    from harness.cli import main

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "t", "store": str(tmp_path / "store"), "workloads": {"ok": _cmd("pass")}}))
    assert main(["matrix", "--file", str(spec), "--address", "127.0.0.1:6379"]) == 2
    assert capsys.readouterr().err == "error: --address needs --backend ray\n"
    assert not (tmp_path / "store").exists()


def test_an_address_nothing_listens_on_is_bad_input_at_once():
    # Ray itself retries such an address for many minutes; the backend checks it first.
    from harness.args import UsageError

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(UsageError, match=f"cannot reach a Ray cluster at 127.0.0.1:{port}: "):
        ray_backend.check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - start < ray_backend.CONNECT_TIMEOUT_S
    with pytest.raises(UsageError, match="expected the head's HOST:PORT, or auto"):
        ray_backend.check_reachable("no-port")
    for fine in (None, "auto", "ray://head:10001"):
        ray_backend.check_reachable(fine)  # left to Ray


def test_a_trials_gpu_share_is_a_fraction_of_one_gpu_or_whole_gpus():
    assert ray_backend.gpu_share(0, 1, 12) == 0.0
    assert ray_backend.gpu_share(1, 1, 1) == 1.0
    assert ray_backend.gpu_share(1, 3, 12) == 0.25
    assert ray_backend.gpu_share(1, 1, 12) * 12 <= 1.0  # twelve shares fit on one GPU
    assert ray_backend.gpu_share(1, 20, 12) == 1.0  # capped at the GPU, as GpuSlots caps
    assert ray_backend.gpu_share(8, 1, 12) == 8.0  # the seed topology: eight whole GPUs


def test_a_task_that_starts_past_its_start_by_time_runs_nothing(tmp_path):
    trial = TrialSpec(trial_id="t/c/0", cell="c", workload=WorkloadSpec(kind="command", argv=(PY, "-c", "pass")))
    assert ray_backend.run_remote(trial, "x", time.time() - 1) == {"late": True}
    value = ray_backend.run_remote(trial, "x", time.time() + 60)
    folder = tmp_path / "landed"
    folder.mkdir()
    (folder / "stale.txt").write_text("a lost attempt's file")
    record = ray_backend.land(value, folder)
    assert record.outcome is Outcome.OK and record.artefacts == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "exposure.json",
        "output.txt",
        "result.json",
        "spec.json",
        "threads.json",
    ]
    assert TrialResult.from_json(json.loads((folder / "result.json").read_text())) == record


def test_landing_refuses_a_file_outside_the_trials_folder(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("../evil.txt", "x")
    record = TrialResult(trial_id="t/c/0", cell="c", trial_index=0, outcome=Outcome.OK)
    with pytest.raises(RuntimeError, match="outside its folder"):
        ray_backend.land({"record": record.to_json(), "zip": buf.getvalue()}, tmp_path)
    assert not (tmp_path.parent / "evil.txt").exists()


def test_a_record_names_the_gpus_its_trial_could_see(tmp_path, monkeypatch):
    from harness.trial import gpu

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-aaa, NVIDIA H200\\n1, GPU-bbb, NVIDIA H200\\n2, GPU-ccc, NVIDIA L4\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    gpu.nvidia_smi.cache_clear()
    gpu.names.cache_clear()
    try:
        assert gpu.names("0") == "NVIDIA H200"
        assert gpu.names("1,0") == "2x NVIDIA H200"
        assert gpu.names("GPU-ccc,0") == "NVIDIA L4, NVIDIA H200"
        assert gpu.names(None) == "NVIDIA H200, NVIDIA H200, NVIDIA L4"
        assert gpu.names("") is None and gpu.names("7") is None
    finally:
        gpu.nvidia_smi.cache_clear()
        gpu.names.cache_clear()
