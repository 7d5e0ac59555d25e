"""tools/crash_threads.py: the figures REPORT.md quotes for the C-stash crashes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "tools.crash_threads"]


def _rows(*stores: str) -> list[list[str]]:
    proc = subprocess.run([*COMMAND, *stores], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines()[2:]]


def test_the_four_gpu_stash_crashes_came_late_with_threads_gone():
    rows = [r for r in _rows("results/gpu-topology-4") if r[1] == "yes"]
    assert len(rows) == 30
    steps = [int(r[2].split("/")[0]) for r in rows]
    threads = [int(r[3]) for r in rows]
    assert min(steps) == 26 and max(steps) == 37
    assert max(threads) == 16 and sum(t < 16 for t in threads) == 29


def test_a_missing_store_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([*COMMAND, str(tmp_path / "none")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: no result store") and not proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1
