"""repro/r23_device_sync_during_capture.py: its CLI and skip on CPU, and that the trainer's failure it
stands for (the CUDA-graph lock cell's 1/29 on the H200, 2026-12-01) is its family. With
`-m cuda`: a device-wide wait beside a recording fails, a current-stream wait does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.diagnosis.families import family

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "repro" / "r23_device_sync_during_capture.py"
CAMPAIGN = ROOT / "results" / "gpu-campaign" / "trials.jsonl"
CELL = "launch-bound:global-lock+cstash-tls-init+cublas-handle-init+stash-incref@dflash-stages"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_HEARTBEAT"}
    # --fix imports the registry: the checkout on PYTHONPATH, as the runner gives every trial (a GPU
    # host's plain checkout has nothing installed).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


def test_help_lists_knobs():
    res = run("--help")
    assert res.returncode == 0, res.stderr
    for knob in ("--shapes", "--calls", "--depth", "--fix", "--switch-interval"):
        assert knob in res.stdout


@pytest.mark.parametrize("args", [("--shapes", "0"), ("--calls", "0"), ("--depth", "0"), ("--fix", "no-such-fix")])
def test_bad_arguments_exit_2(args):
    res = run(*args)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith("error:")


def test_without_cuda_it_skips_with_exit_0():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: the script would really run")
    for args in ((), ("--fix", "stream-sync")):
        res = run(*args)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "SKIP: needs CUDA"


def test_the_trainer_failure_it_stands_for_is_a_device_wide_synchronize():
    failed = [
        json.loads(line)
        for line in CAMPAIGN.read_text().splitlines()
        if json.loads(line)["cell"] == CELL and json.loads(line)["outcome"] == "crash"
    ]
    assert len(failed) == 1
    summary = failed[0]["signature_summary"]
    assert "dflash.devices:synchronize < dflash.target_loop:forward" in summary
    assert family(summary) == "capture"


@pytest.mark.cuda
def test_a_device_wide_wait_beside_a_recording_fails_and_a_stream_wait_does_not():
    plain, fixed = run(), run("--fix", "stream-sync")
    assert plain.returncode == 1 and "REPRODUCED:" in plain.stdout, plain.stdout + plain.stderr
    assert "stream is capturing" in plain.stdout + plain.stderr
    assert fixed.returncode == 0 and "NOT REPRODUCED" in fixed.stdout, fixed.stdout + fixed.stderr
