"""Processes the program starts are observed as its first process is: their threads' deaths are
recorded with the child's pid and role, a race in a child is named there, the fix it is offered
reaches it (`--children`), and without `--children` nothing of the harness acts in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.diagnosis import diagnose

ROOT = Path(__file__).resolve().parents[1]
F2_MESSAGE = "Detected that you are using FX to symbolically trace a dynamo-optimized function"
LAUNCHER = f"""
import multiprocessing as mp, os, sys, threading

def work():
    raise RuntimeError({F2_MESSAGE!r})

def rank(r):
    print("child fixes:", os.environ.get("HARNESS_FIXES"), flush=True)
    ts = [threading.Thread(target=work, name=f"serve-{{i}}") for i in range(2)]
    [t.start() for t in ts]; [t.join() for t in ts]

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=rank, args=(0,), name="rank-0")
    p.start(); p.join()
"""


def _stress(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    program = tmp_path / "launch.py"
    program.write_text(LAUNCHER)
    argv = ["stress", "-p", "1", "--max-runs", "1", *options, "-o", str(tmp_path / "out"), "--", "python", str(program)]
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_a_race_in_a_spawned_worker_is_named_with_its_process_and_offered_with_children(tmp_path):
    p = _stress(tmp_path, "--fix", "none")
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    (f2,) = [f for f in diagnose.diagnose(diagnose.collect([str(tmp_path / "out")])) if f.race == "F2"]
    assert f2.measured.startswith("it failed in a child process of the run, pid "), f2.measured
    assert "(rank-0)" in f2.measured
    # The only arm offered is one that reaches the child.
    assert " --children --fix none --fix " in f2.try_fixes, f2.try_fixes
    output = (tmp_path / "out" / "0" / "output.txt").read_text()
    assert "child fixes: None" in output  # without --children the fix stays in the first process


def test_with_children_the_fixes_reach_the_workers(tmp_path):
    p = _stress(tmp_path, "--children", "--fix", "none")
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    output = (tmp_path / "out" / "0" / "output.txt").read_text()
    assert "child fixes: none" in output and output.count("HARNESS_FIXES none") == 2, output
