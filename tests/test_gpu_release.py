"""GPU memory is back after a trial: harness/trial/gpu.py against a fake nvidia-smi, and run_trial.

The fake (tests/scripts/fake_nvidia_smi.py) is put first on PATH as `nvidia-smi`; it lists the
pids written in a file, so a test decides which pids "hold GPU memory" and when they let go.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.trial import gpu, runner
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

SCRIPTS = Path(__file__).parent / "scripts"
UNRELATED_PID = 999_999_999
"""Listed as a GPU process but never a trial's pid (above any Linux pid_max)."""


class FakeSmi:
    def __init__(self, root: Path):
        self.listing = root / "listing.txt"
        self.log = root / "calls.log"

    def hold(self, *pids: int) -> None:
        self.listing.write_text("".join(f"{p}\n" for p in pids))

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture(autouse=True)
def fresh_lookup():
    """nvidia-smi is looked up once per process; each test here changes PATH, so forget it."""
    gpu.nvidia_smi.cache_clear()
    yield
    gpu.nvidia_smi.cache_clear()


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> FakeSmi:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SCRIPTS / "fake_nvidia_smi.py"}" "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    fake = FakeSmi(tmp_path)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FILE", str(fake.listing))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_LOG", str(fake.log))
    fake.hold(UNRELATED_PID)
    return fake


@pytest.fixture
def no_smi(tmp_path, monkeypatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# ------------------------------------------------------------------------------- harness/trial/gpu.py


def test_compute_pids_reads_the_query(fake_smi):
    fake_smi.listing.write_text("4242, 512\n4343, 0\n4444, [N/A]\n")
    assert gpu.compute_pids() == {4242, 4444}  # 0 MiB holds nothing; N/A counts as held
    assert fake_smi.calls() == ["--query-compute-apps=pid,used_memory --format=csv,noheader,nounits"]


def test_released_pid_gives_true(fake_smi):
    fake_smi.hold(UNRELATED_PID, 4242)
    timer = threading.Timer(0.6, fake_smi.hold, args=(UNRELATED_PID,))
    start = time.monotonic()
    timer.start()
    try:
        assert gpu.wait_released({4242, 4343}, timeout_s=10.0) is True
    finally:
        timer.join()
    assert time.monotonic() - start >= 0.6
    assert len(fake_smi.calls()) >= 2


def test_pid_that_stays_listed_gives_false(fake_smi):
    fake_smi.hold(UNRELATED_PID, 4242)
    start = time.monotonic()
    assert gpu.wait_released({4242}, timeout_s=0.5) is False
    assert 0.5 <= time.monotonic() - start < 8
    assert gpu.held_by({4242, 4343}) == {4242}


def test_no_nvidia_smi_gives_none(no_smi):
    assert not gpu.available()
    assert gpu.compute_pids() is None
    assert gpu.wait_released({4242}, timeout_s=0.5) is None


def test_failing_nvidia_smi_gives_none(fake_smi, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_RC", "9")
    assert gpu.available()
    assert gpu.compute_pids() is None
    assert gpu.wait_released({4242}, timeout_s=0.5) is None


def test_nvidia_smi_is_looked_up_once(fake_smi, monkeypatch):
    assert gpu.available()
    monkeypatch.setenv("PATH", "")
    assert gpu.available() and gpu.compute_pids() == {UNRELATED_PID}


def test_memory_of_sums_the_given_pids_per_gpu(fake_smi):
    fake_smi.listing.write_text(
        "4242, GPU-a, 1000\n4242, GPU-b, 300\n4343, GPU-a, 24\n4444, GPU-a, [N/A]\n999999999, GPU-a, 99999\n"
    )
    assert gpu.memory_of({4242, 4343, 4444}) == {"GPU-a": 1024.0, "GPU-b": 300.0}
    assert gpu.memory_of({5555}) == {}
    assert fake_smi.calls()[-1] == "--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits"
    fake_smi.listing.write_text("not a pid, GPU-a, 12\n")
    assert gpu.memory_of({4242}) is None


def test_the_memory_sampler_keeps_each_gpus_highest_sample_of_the_live_pids(fake_smi):
    pids = {7}
    sampler = gpu.MemorySampler(lambda: set(pids), period_s=600.0)
    assert sampler.stop() is None  # never started, never sampled: no figure
    sampler = gpu.MemorySampler(lambda: set(pids), period_s=600.0).start()
    for listing in ("7, GPU-a, 1024\n7, GPU-b, 512\n", "7, GPU-a, 512\n7, GPU-b, 1536\n", ""):
        fake_smi.listing.write_text(listing + "8, GPU-b, 99999\n")  # 8: another trial's pid
        sampler.sample_now()
        if listing:  # the sample is in the figures by the time sample_now returns
            assert sampler.peak_mib["GPU-a"] >= 1024.0
    assert sampler.stop() == 1.5 and sampler.peak_mib == {"GPU-a": 1024.0, "GPU-b": 1536.0}
    assert [t for t in threading.enumerate() if t.name == "harness-gpu-memory"] == []


def test_the_memory_sampler_rounds_a_small_figure_up_and_stops_asking_a_failing_nvidia_smi(fake_smi, monkeypatch):
    sampler = gpu.MemorySampler(lambda: {7}, period_s=600.0).start()
    fake_smi.listing.write_text("7, GPU-a, 3\n")
    sampler.sample_now()
    monkeypatch.setenv("FAKE_NVIDIA_SMI_RC", "9")
    sampler.sample_now()  # cannot tell: the thread ends
    calls = len(fake_smi.calls())
    sampler.sample_now(timeout_s=0.2)
    assert len(fake_smi.calls()) == calls
    assert sampler.stop() == 0.01  # 3 MiB is held memory, not 0 GiB


# ------------------------------------------------------------------------------------ run_trial


def _command(trial_id: str, *argv: str, hang_s: float = 10.0) -> TrialSpec:
    return TrialSpec(
        trial_id=trial_id,
        cell=trial_id,
        timeout_s=30.0,
        hang_s=hang_s,
        workload=WorkloadSpec(kind="command", argv=(sys.executable, *argv)),
    )


def test_ok_trial_with_nvidia_smi_releases(tmp_path, fake_smi):
    result = run_trial(_command("ok", str(SCRIPTS / "ok.py")), tmp_path / "ok")
    assert result.outcome is Outcome.OK and result.detail == "exit 0"
    assert result.gpu_released is True
    assert fake_smi.calls(), "the runner did not ask nvidia-smi"
    stored = json.loads((tmp_path / "ok" / "result.json").read_text())
    assert stored["gpu_released"] is True


@pytest.mark.parametrize("script, outcome, hang_s", [("crash", Outcome.CRASH, 10.0), ("deadlock", Outcome.HANG, 2.0)])
def test_failed_trial_keeps_its_outcome_and_is_checked(tmp_path, fake_smi, script, outcome, hang_s):
    result = run_trial(_command(script, str(SCRIPTS / f"{script}.py"), hang_s=hang_s), tmp_path / script)
    assert result.outcome is outcome and result.gpu_released is True
    assert "GPU memory" not in result.detail and fake_smi.calls()


def test_child_pid_still_holding_memory_is_reported_not_hidden(tmp_path, fake_smi, monkeypatch):
    monkeypatch.setattr(runner, "GPU_RELEASE_TIMEOUT_S", 0.5)
    code = f"import os; print(f'pid={{os.getpid()}}');open({str(fake_smi.listing)!r}, 'a').write(f'{{os.getpid()}}\\n')"
    result = run_trial(_command("leak", "-c", code), tmp_path / "leak")
    pid = int(re.search(r"^pid=(\d+)$", (tmp_path / "leak" / "output.txt").read_text(), re.M).group(1))
    assert result.outcome is Outcome.OK
    assert result.gpu_released is False
    assert result.detail == f"exit 0; GPU memory still held by pids [{pid}] 0.5 s after the trial"
    stored = json.loads((tmp_path / "leak" / "result.json").read_text())
    assert stored["gpu_released"] is False and stored["detail"] == result.detail


def test_grandchild_the_runner_saw_is_checked_too(tmp_path, fake_smi, monkeypatch):
    """The child exits 0 at once; its grandchild (same group) took GPU memory and is killed by
    the runner: its pid must be among those checked."""
    monkeypatch.setattr(runner, "GPU_RELEASE_TIMEOUT_S", 0.5)
    grandchild = f"import os, time;open({str(fake_smi.listing)!r}, 'a').write(f'{{os.getpid()}}\\n');time.sleep(600)"
    code = (
        "import os, subprocess, sys, time;"
        f"gc = subprocess.Popen([sys.executable, '-c', {grandchild!r}]);"
        "print(f'grandchild={gc.pid}', flush=True);"
        f"[time.sleep(0.05) for _ in range(400) if str(gc.pid) not in "
        f"open({str(fake_smi.listing)!r}).read()]"
    )
    result = run_trial(_command("gc", "-c", code), tmp_path / "gc")
    gc_pid = int(re.search(r"^grandchild=(\d+)$", (tmp_path / "gc" / "output.txt").read_text(), re.M).group(1))
    assert result.outcome is Outcome.OK, result.detail
    assert result.gpu_released is False
    assert result.detail == (f"exit 0; GPU memory still held by pids [{gc_pid}] 0.5 s after the trial")
    with pytest.raises(ProcessLookupError):
        os.kill(gc_pid, 0)


def test_the_runner_samples_what_a_trials_processes_hold(tmp_path, fake_smi, monkeypatch):
    """Every GPU_MEM_POLL_S while the trial runs: its own pids' memory, summed per GPU; another
    process's memory on the same GPU is not the trial's."""
    monkeypatch.setattr(runner, "GPU_MEM_POLL_S", 0.1)
    monkeypatch.setattr(runner, "GPU_RELEASE_TIMEOUT_S", 0.5)  # the fake lists the pid for ever
    fake_smi.listing.write_text(f"{UNRELATED_PID}, GPU-fake-0, 99999\n")
    code = (
        "import os, time;"
        f"open({str(fake_smi.listing)!r}, 'a').write(f'{{os.getpid()}}, GPU-fake-0, 2048\\n"
        f"{{os.getpid()}}, GPU-fake-1, 512\\n');"
        "time.sleep(1.5)"
    )
    result = run_trial(_command("held", "-c", code), tmp_path / "held")
    assert result.outcome is Outcome.OK and result.gpu_mem_gib == 2.0 and result.gpu_released is False
    assert not [t for t in threading.enumerate() if t.name.startswith("harness-gpu-memory")]  # stopped
    assert json.loads((tmp_path / "held" / "result.json").read_text())["gpu_mem_gib"] == 2.0


def test_each_trial_samples_in_a_thread_named_after_its_process_group(tmp_path, fake_smi, monkeypatch):
    monkeypatch.setattr(runner, "GPU_RELEASE_TIMEOUT_S", 0.5)
    names = []
    real = gpu.MemorySampler

    def spy(*args, **kwargs):
        names.append(kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(gpu, "MemorySampler", spy)
    code = "import os; print(f'pid={os.getpid()}')"
    run_trial(_command("named", "-c", code), tmp_path / "named")
    pid = re.search(r"^pid=(\d+)$", (tmp_path / "named" / "output.txt").read_text(), re.M).group(1)
    assert names == [f"harness-gpu-memory-{pid}"]


def test_a_hung_trial_is_sampled_before_it_is_killed(tmp_path, fake_smi, monkeypatch):
    """No periodic sample falls within the trial (the poll is longer than the run): the figure is
    the one taken after the hang was seen and before the kill freed the memory."""
    monkeypatch.setattr(runner, "GPU_MEM_POLL_S", 600.0)
    monkeypatch.setattr(runner, "GPU_RELEASE_TIMEOUT_S", 0.5)
    code = (
        "import os, threading;"
        f"open({str(fake_smi.listing)!r}, 'a').write(f'{{os.getpid()}}, GPU-fake-0, 3072\\n');"
        "threading.Event().wait()"
    )
    result = run_trial(_command("hung", "-c", code, hang_s=1.0), tmp_path / "hung")
    assert result.outcome is Outcome.HANG and result.gpu_mem_gib == 3.0 and result.gpu_released is False


def test_cpu_host_pays_nothing(tmp_path, no_smi, monkeypatch):
    scans: list[int] = []
    real = runner.live_members
    monkeypatch.setattr(runner, "live_members", lambda pgid: scans.append(pgid) or real(pgid))
    result = run_trial(_command("cpu", str(SCRIPTS / "ok.py")), tmp_path / "cpu")
    assert result.outcome is Outcome.OK and result.detail == "exit 0"
    assert result.gpu_released is None and result.gpu_mem_gib is None and scans == []
    assert json.loads((tmp_path / "cpu" / "result.json").read_text())["gpu_released"] is None


# --------------------------------------------------------------------------------- the record


def test_gpu_released_round_trips_and_old_records_load():
    result = TrialResult(
        trial_id="t", cell="c", trial_index=0, outcome=Outcome.OK, gpu_released=False, gpu_mem_gib=12.5
    )
    assert TrialResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    old = result.to_json()
    del old["gpu_released"], old["gpu_mem_gib"]
    assert TrialResult.from_json(old).gpu_released is None
    assert TrialResult.from_json(old).gpu_mem_gib is None


def test_a_sampler_that_raises_stops_and_says_why(fake_smi):
    calls = iter([{7}])

    def pids():
        return next(calls)  # the second sample raises StopIteration

    fake_smi.listing.write_text("7, GPU-a, 2048\n")
    sampler = gpu.MemorySampler(pids, period_s=600.0).start()
    sampler.sample_now()
    sampler.sample_now()
    assert sampler.stop() == 2.0 and sampler.error == "StopIteration: "


def test_run_trial_notes_a_sampler_that_stopped_early_in_detail(tmp_path, fake_smi, monkeypatch):
    def broken(root_pid):
        raise RuntimeError("no /proc here")

    monkeypatch.setattr(runner, "GPU_MEM_POLL_S", 0.05)
    monkeypatch.setattr(
        runner,
        "live_members",
        lambda pid: broken(pid) if threading.current_thread().name.startswith("harness-gpu-memory") else {pid},
    )
    result = run_trial(_command("ok", "-c", "import time; time.sleep(0.5)"), tmp_path / "ok")
    assert result.outcome is Outcome.OK
    assert result.detail == "exit 0; GPU memory sampler stopped early: RuntimeError: no /proc here"
