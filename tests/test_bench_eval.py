"""`python -m tools.bench_eval`: the evaluation one prompt at a time against one batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tools.bench_eval", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_it_times_both_ways_and_finds_the_same_tau():
    done = _run("--prompts", "3", "--new-tokens", "6", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 prompts x 6 new tokens" in done.stdout and "same tau: yes" in done.stdout
    assert "one at a time" in done.stdout and "one batch" in done.stdout


def test_bad_input_is_one_line_and_exit_2():
    for args in (["--preset", "nope"], ["--prompts", "0"], ["--set", "drafter.block_size=1"]):
        done = _run(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), args
