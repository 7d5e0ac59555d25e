"""Hang dumps: py-spy on a live deadlock, the faulthandler fallback, and the grouped text."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.trial import hangs
from harness.trial.hangs import Frame, ThreadStack, parse_faulthandler, render_text

SCRIPTS = Path(__file__).parent / "scripts"
FIXTURES = Path(__file__).parent / "fixtures" / "tracebacks"


@pytest.fixture
def deadlocked(tmp_path):
    """A running deadlock.py (its own session, output to a file), killed afterwards."""
    yield from _spawn(tmp_path, "deadlock.py")


@pytest.fixture
def spinner(tmp_path):
    yield from _spawn(tmp_path, "busy_hang.py")


def _spawn(tmp_path: Path, script: str):
    out = tmp_path / "output.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no harness bootstrap
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPTS / script)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while "pid=" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # let the threads reach their blocking calls
        yield proc, out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def test_pyspy_dump_names_threads_and_innermost_frames(deadlocked, tmp_path):
    proc, _ = deadlocked
    dump = hangs.dump(proc.pid, tmp_path)
    assert dump.method in ("py-spy --native", "py-spy") and not dump.errors
    names = {t.name: t for t in dump.threads}
    inner = {n: [f.name for f in t.frames if f.is_python][0] for n, t in names.items()}
    assert inner["locker-0"] == "take_a_then_b" and inner["locker-1"] == "take_b_then_a"
    text = (tmp_path / "hang_dump.txt").read_text()
    assert "1 thread: locker-0 (idle)" in text and "take_b_then_a (scripts/deadlock.py:" in text
    assert (tmp_path / "pyspy.json").is_file()


def test_faulthandler_fallback_reads_the_dump_from_the_output(deadlocked, tmp_path):
    proc, out = deadlocked
    dump = hangs.dump(proc.pid, tmp_path, output_path=str(out), pyspy=None)
    assert dump.method == "faulthandler" and dump.errors == ["py-spy not found"]
    inner = sorted(t.frames[0].name for t in dump.threads if t.frames)
    assert inner == ["_wait_for_tstate_lock", "take_a_then_b", "take_b_then_a"]
    assert proc.poll() is None  # SIGUSR1 dumped, did not kill


def test_no_sigusr1_is_sent_to_a_child_that_does_not_catch_it(spinner, tmp_path):
    proc, out = spinner
    dump = hangs.dump(proc.pid, tmp_path, output_path=str(out), pyspy=None)
    assert dump.method == "none" and not dump.threads
    assert "SIGUSR1 is not caught" in dump.errors[-1]
    time.sleep(0.2)
    assert proc.poll() is None  # the default action would have killed it


def test_broken_pyspy_falls_back_and_records_why(deadlocked, tmp_path):
    proc, out = deadlocked
    dump = hangs.dump(proc.pid, tmp_path, output_path=str(out), pyspy="/bin/false")
    assert dump.method == "faulthandler"
    assert [e.split(":")[0] for e in dump.errors] == ["py-spy --native", "py-spy"]


def test_parse_faulthandler_on_a_real_fatal_report():
    text = (FIXTURES / "r5_reset_segfault" / "1.txt").read_text()
    threads = parse_faulthandler(text)
    assert [t.status for t in threads] == ["", "current"]
    assert threads[1].frames[0].name == "compile_wrapper"
    assert threads[0].frames[0].name == "reset_forever"


def test_render_text_groups_identical_stacks():
    stack = (
        Frame(name="Condition.wait", filename="/usr/lib/python3.11/threading.py", line=331),
        Frame(name="run", filename="/repo/dflash/train_worker.py", line=9),
    )
    threads = tuple(
        ThreadStack(name=f"dflash-train-{i}", thread_id=str(i), status="idle", frames=stack) for i in range(3)
    )
    other = ThreadStack(name="MainThread", thread_id="9", frames=stack[1:])
    text = render_text((*threads, other))
    assert (
        "3 threads: dflash-train-0, dflash-train-1, dflash-train-2 (idle)\n"
        "    Condition.wait (python3.11/threading.py:331)\n"
        "    run (dflash/train_worker.py:9)\n"
    ) in text
    assert "1 thread: MainThread\n    run (dflash/train_worker.py:9)\n" in text


def test_find_pyspy_prefers_the_interpreter_folder():
    found = hangs.find_pyspy()
    local = Path(sys.executable).parent / "py-spy"
    if local.is_file():
        assert found == str(local)
