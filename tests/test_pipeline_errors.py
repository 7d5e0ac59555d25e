"""Error propagation: a fault at any point, in any stage thread, ends the run cleanly with exit 1.

Each case injects `raise` at one fault point limited to one thread (`point@thread=raise`, the
HARNESS_FAULTS thread filter) into a small in-process run with 2 prefetch, 2 target and 2
drafter threads, and checks what a person would see: exit code 1 within 10 s, the failing
thread named in a `=== thread <name> failed: InjectedFault: ... ===` report, and every stage
thread joined (threading.enumerate() back to its baseline).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time

import pytest
from small_run import REPO, small_config, stage_threads, train_argv

from dflash import fault_points
from dflash.train import train
from harness.runtime.errors import InjectedFault

EXIT_DEADLINE_S = 10.0


STAGE_POINTS = {
    "prefetch": [p for p in fault_points.POINTS if p.startswith("prefetch.")],
    "target": [p for p in fault_points.POINTS if p.startswith("target.")],
    "train": [p for p in fault_points.POINTS if p.startswith("drafter.")],
}
CASES = [(point, f"dflash-{stage}-{i}") for stage, points in STAGE_POINTS.items() for point in points for i in (0, 1)]
CASES.append(("gate.before_open", "dflash-train-*"))


@pytest.mark.parametrize("point,thread", CASES, ids=[f"{p}@{t}" for p, t in CASES])
def test_fault_in_any_thread_exits_1_and_names_the_thread(point, thread, fault_env, tmp_path):
    fault_env(f"{point}@{thread}=1*raise(boom)")
    before = stage_threads()
    t0 = time.monotonic()
    outcome = train(small_config(tmp_path / "run"))
    elapsed = time.monotonic() - t0
    assert outcome.exit_code == 1
    failures = outcome.pipeline.failures
    assert failures, "no failure recorded"
    first = failures[0]
    assert isinstance(first.exc, InjectedFault)
    assert point in str(first.exc)
    if "*" not in thread:
        assert first.thread == thread
    report = outcome.pipeline.report()
    assert f"=== thread {first.thread} failed: InjectedFault: injected fault at fault point {point}" in report
    assert "Traceback (most recent call last)" in report
    # Only the injected failure is reported: the others stopped because of it.
    assert [f.thread for f in failures] == [first.thread]
    assert outcome.pipeline.alive == []
    assert stage_threads() == before
    assert elapsed < EXIT_DEADLINE_S + 20, f"run took {elapsed:.1f}s"
    assert not os.path.exists(tmp_path / "run" / "checkpoints"), "a failed run wrote a checkpoint"


def test_stop_after_failure_is_fast(fault_env, tmp_path):
    """From the recorded failure to train() returning: well within the 10 s contract."""
    fault_env("drafter.after_backward@dflash-train-1=delay(20);drafter.after_step@dflash-train-1=1*raise")
    outcome = train(small_config(tmp_path / "run", steps=50))
    done = time.monotonic()
    assert outcome.exit_code == 1
    assert outcome.pipeline.failures[0].thread == "dflash-train-1"
    assert done - outcome.pipeline.failures[0].at < EXIT_DEADLINE_S


def test_every_failure_is_collected(fault_env, tmp_path):
    """Both drafter threads fail before any stop check: both failures are reported."""
    fault_env("drafter.before_compile@dflash-train-*=raise")
    outcome = train(small_config(tmp_path / "run"))
    assert outcome.exit_code == 1
    names = sorted(f.thread for f in outcome.pipeline.failures)
    assert names == ["dflash-train-0", "dflash-train-1"]
    assert all(isinstance(f.exc, InjectedFault) for f in outcome.pipeline.failures)
    report = outcome.pipeline.report()
    assert report.count("=== thread dflash-train-") == 2


def test_small_config_trains_without_faults(tmp_path):
    before = stage_threads()
    outcome = train(dataclasses.replace(small_config(tmp_path / "run")))
    assert outcome.exit_code == 0, outcome.pipeline.report()
    assert outcome.final["steps"] == 4
    assert stage_threads() == before


def test_subprocess_fault_exits_1_with_the_thread_report(tmp_path):
    """The process contract as the harness sees it: exit status 1 and the report on stderr."""
    env = dict(os.environ, PYTHONPATH=REPO, HARNESS_FAULTS="drafter.after_backward@dflash-train-1=raise(boom)")
    proc = subprocess.run(
        train_argv(tmp_path / "run"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    header = (
        "=== thread dflash-train-1 failed: InjectedFault: injected fault at fault point "
        "drafter.after_backward in thread dflash-train-1: boom ==="
    )
    assert header in lines
    after = lines[lines.index(header) + 1]
    assert after == "Traceback (most recent call last):"
    assert sum(ln.startswith("=== thread ") for ln in lines) == 1
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    # Its last event says what GPU memory it held (none on CPU): what the harness packs trials by.
    events = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert events[-1]["event"] == "failed" and events[-1]["gpu_mem_peak_gib"] is None
    assert not any(e.get("event") == "final" for e in events)
