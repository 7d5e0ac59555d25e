"""dflash.gpu_busy against a fake `nvidia-smi` that prints utilization samples in a loop."""

import os
import stat
import time

from dflash.gpu_busy import GpuBusy

FAKE = """#!/bin/sh
# prints 40 then 80 forever, like `nvidia-smi --query-gpu=utilization.gpu ... -lms N`
echo "$@" > "{args}"
while true; do echo 40; echo 80; sleep 0.02; done
"""


def _install(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text(FAKE.format(args=tmp_path / "args"))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_mean_of_samples_for_the_asked_gpu(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    with GpuBusy(3) as g:
        deadline = time.monotonic() + 10
        while len(g.samples) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(g.samples) >= 20
    assert 0.5 <= g.fraction <= 0.7  # alternating 0.4 / 0.8
    assert "-i 3" in (tmp_path / "args").read_text()
    assert g._proc.poll() is not None  # the sampler is gone after the block


def test_cpu_device_or_no_nvidia_smi_gives_none(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    with GpuBusy(None) as g:
        pass
    assert g.fraction is None and not (tmp_path / "args").exists()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with GpuBusy(0) as g:
        pass
    assert g.fraction is None


def test_a_window_keeps_only_the_samples_read_inside_it():
    g = GpuBusy(0)
    g.times, g.samples = [1.0, 2.0, 3.0, 4.0], [0.0, 0.5, 1.0, 0.2]
    assert g.fraction == 0.425
    assert g.fraction_between(2.0, 3.0) == 0.75  # the compile-time zeros left out
    assert g.fraction_between(5.0, 6.0) is None


def test_samples_carry_the_monotonic_time_they_were_read(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    t0 = time.monotonic()
    with GpuBusy(0) as g:
        deadline = time.monotonic() + 10
        while len(g.samples) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(g.times) == len(g.samples) >= 10
    assert t0 <= g.times[0] <= g.times[-1] <= time.monotonic()
    assert g.fraction_between(t0, time.monotonic()) == g.fraction
