"""Trials die with the process that runs them (harness.trial.lifeline), SIGKILL included: after
`kill -9` of a matrix, none of its trials' processes may run on, grandchildren and a grandchild
that left the group with setsid included.

Workloads are `python -c` programs, never torch: this file runs in seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from matrix_specs import command, spec_dict, write_spec

from harness.trial import lifeline

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent

# A trial that starts a grandchild in its own group and one under setsid, writes the three pids
# and its group to a file named by its pid, and sleeps.
FAMILY = (
    "import os, subprocess, sys, time\n"
    "sleep = [sys.executable, '-c', 'import time; time.sleep(120)']\n"
    "a = subprocess.Popen(sleep)\n"
    "b = subprocess.Popen(sleep, start_new_session=True)\n"
    "path = os.path.join(sys.argv[1], str(os.getpid()))\n"
    "open(path + '.tmp', 'w').write(f'{os.getpid()} {a.pid} {b.pid} {os.getpgid(0)}')\n"
    "os.rename(path + '.tmp', path)\n"
    "time.sleep(120)\n"
)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie holds nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(alive(int(p.parent.name)) for p in Path("/proc").glob("[0-9]*/stat") if _pgid(p) == pgid)


def _pgid(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def wait_for_files(folder: Path, count: int, timeout_s: float) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [p for p in folder.iterdir() if not p.name.endswith(".tmp")]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{folder}: fewer than {count} trials started within {timeout_s:g} s")


def trial_family(files: list[Path]) -> tuple[list[int], list[int]]:
    """(pids, process groups) the started trials wrote."""
    pids, groups = [], []
    for f in files:
        child, grandchild, escaped, pgid = map(int, f.read_text().split())
        pids += [child, grandchild, escaped]
        groups.append(pgid)
    return pids, groups


def assert_all_gone(pids: list[int], groups: list[int], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids) and not any(group_alive(g) for g in groups):
            return
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for p in left:  # do not leave them to the next test
        os.kill(p, signal.SIGKILL)
    raise AssertionError(f"trial processes {left} survived their runner by {within_s:g} s")


def test_a_matrix_killed_with_sigkill_leaves_no_trial_process_running(tmp_path):
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    write_spec(tmp_path, spec_dict(tmp_path, "t", {"family": command("-c", FAMILY, str(pids_dir), timeout_s=120)}))
    driver = subprocess.Popen(
        [PY, "-m", "harness", "matrix", "--file", str(tmp_path / "spec.json"), "--no-live"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        files = wait_for_files(pids_dir, 2, timeout_s=60)
    finally:
        driver.kill()
        driver.wait(timeout=30)
    pids, groups = trial_family(files)
    assert len(pids) == 6
    assert_all_gone(pids, groups, within_s=5.0)
    assert not (tmp_path / "store" / "trials.jsonl").exists()  # nothing recorded of the killed trials


def test_the_reaper_kills_every_process_carrying_its_token_and_their_groups(tmp_path):
    tok = "test-" + os.urandom(4).hex()
    env = {**os.environ, lifeline.ENV: tok}
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    trial = subprocess.Popen([PY, "-c", FAMILY, str(pids_dir)], env=env, start_new_session=True)
    try:
        pids, groups = trial_family(wait_for_files(pids_dir, 1, timeout_s=30))
        assert sorted(lifeline.carriers(tok)) == sorted(pids)
        assert lifeline.reap(tok, settle_s=0.3) == 3
        trial.wait(timeout=10)
        assert_all_gone(pids, groups, within_s=5.0)
        assert lifeline.carriers(tok) == []
    finally:
        trial.kill()
        trial.wait(timeout=10)
