"""Fast checks of repro/r19_hf_output_capture_under_compile.py (the flaky reproduction itself is
measured with `python -m harness stress`, see results/r19/, not asserted here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "repro" / "r19_hf_output_capture_under_compile.py"


def run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HARNESS_HEARTBEAT", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_r19_help_lists_knobs():
    res = run("--help", timeout=30)
    assert res.returncode == 0, res.stderr
    for knob in ("--compiles", "--secs", "--switch-interval", "--fix"):
        assert knob in res.stdout


def test_r19_bad_fix_is_one_line_exit_2():
    res = run("--fix", "no-such-fix", timeout=30)
    assert res.returncode == 2
    assert res.stderr.startswith("error: ")


@pytest.mark.timeout(60)
def test_r19_global_lock_short_run_does_not_reproduce():
    res = run("--fix", "global-lock", "--compiles", "1", "--batch", "2", timeout=55)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "NOT REPRODUCED" in res.stdout
    assert "REPRODUCED:" not in res.stdout.replace("NOT REPRODUCED", "")
    assert "WRONG_RESULT:" not in out
