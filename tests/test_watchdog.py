"""Stall watchdog: no step for train.stall_s -> a dump naming every thread, a headline saying
where each one is (compiling, stuck, waiting), the diagnosis, exit 4; quiet while steps come."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
import time

import pytest
import torch
from small_run import REPO, end_of_run, small_config, start_trainer, train_argv

from dflash import stacks, watchdog
from dflash.channel import Channel
from dflash.pipeline_run import STALL_JOIN_S
from dflash.train import Trainer
from harness.runtime import failpoints as faults

STUCK_AFTER_STEP_1 = "drafter.after_step@dflash-train-1=1*delay(600000)"


def _timed_lines(proc: subprocess.Popen, limit_s: float) -> list[tuple[float, str]]:
    """(seconds since start, line) of the child's stderr until it exits; kills it after limit_s."""
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(
        target=lambda: lines.extend((time.monotonic() - t0, ln.rstrip("\n")) for ln in proc.stderr), name="test-reader"
    )
    reader.start()
    try:
        proc.wait(timeout=limit_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(10)
    lines.append((time.monotonic() - t0, f"<exit {proc.returncode}>"))
    return lines


@pytest.mark.slow
def test_stalled_run_exits_4_with_dump_headline_and_diagnosis(tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=REPO, HARNESS_FAULTS=STUCK_AFTER_STEP_1)
    argv = train_argv(run, "train.steps=50", "train.stall_s=2")
    proc = start_trainer(argv, tmp_path, env)
    out_lines: list[str] = []
    out_reader = threading.Thread(target=lambda: out_lines.extend(proc.stdout), name="test-out")
    out_reader.start()
    lines = _timed_lines(proc, limit_s=120)
    out_reader.join(10)
    err = "\n".join(ln for _, ln in lines)
    assert proc.returncode == watchdog.EXIT_STALLED, err[-3000:]
    heads = [(t, ln) for t, ln in lines if ln.startswith("STALLED: ")]
    assert heads, err[-3000:]
    declared, head = heads[0]
    # From the headline to the exit: the join allowance plus the diagnosis, not minutes.
    assert lines[-1][0] - declared < STALL_JOIN_S + 10, err[-3000:]
    assert "no training step for 2 s after step 1 (train.stall_s=2)" in head
    assert "stuck: dflash-train-1 in harness.runtime.failpoints:_perform:" in head
    waiting = head.split("waiting on them: ")[1].split(";")[0].split(", ")
    assert "dflash-train-0" in waiting and "dflash-train-1" not in waiting
    dump_path = str(run / watchdog.DUMP_NAME)
    assert f"dump: {dump_path}" in head
    dump = open(dump_path).read()
    assert dump.splitlines()[0] == head
    assert "dflash-train-1 = 0x" in dump and "harness.runtime.failpoints:_perform:" in dump
    # The stacks themselves name the stuck thread: py-spy's by name, faulthandler's as annotated.
    assert '"dflash-train-1"' in dump or "[dflash-train-1] (most recent call first)" in dump
    assert "dflash-watchdog" not in dump.split("\n\n", 1)[1], "the dumping thread is noise"
    # The diagnosis came after the headline: the harness's answer naming the dump, or the hint.
    after = err.split(head, 1)[1]
    assert f"diagnose with: python -m harness diagnose {dump_path}" in after or dump_path in after
    assert "=== threads still alive after the shutdown deadline: dflash-train-1 ===" in err
    failed = [json.loads(ln) for ln in out_lines if ln.startswith('{"event": "failed"')]
    assert failed and failed[0]["stalled"]["step"] == 1
    assert failed[0]["stalled"]["threads"]["dflash-train-1"].startswith("harness.runtime.failpoints:_perform:")


def test_first_step_allowance_applies_until_the_first_step(tmp_path, monkeypatch):
    """Stuck before any step: the first-step allowance decides (stall_s alone would not fire)."""
    monkeypatch.setenv(faults.ENV_PLAN, "drafter.before_forward@dflash-train-0=1*delay(5000)")
    cfg = small_config(tmp_path / "run", steps=20, stall_s=100.0, first_step_stall_s=1.0)
    err = io.StringIO()
    t0 = time.monotonic()
    try:
        outcome = Trainer(cfg, out=io.StringIO(), err=err).run()
        returned = time.monotonic()
    finally:
        end_of_run()
    assert outcome.exit_code == watchdog.EXIT_STALLED, err.getvalue()[-2000:]
    assert outcome.stall.first and outcome.stall.step == 0
    assert outcome.stall.headline.startswith(
        "STALLED: no training step for 1 s since this run started (train.first_step_stall_s=1)"
    )
    assert "stuck: dflash-train-0 in harness.runtime.failpoints:_perform:" in outcome.stall.headline
    assert returned - t0 < 60
    assert returned - outcome.stall.at < STALL_JOIN_S + 1  # did not wait for the sleeper


def _watch(progress, *, stall_s: float, first_step_stall_s: float, out_dir) -> watchdog.Watchdog:
    wd = watchdog.Watchdog(
        progress=progress,
        stall_s=stall_s,
        first_step_stall_s=first_step_stall_s,
        out_dir=str(out_dir),
        err=io.StringIO(),
        diagnose_timeout_s=0.01,
    )
    wd.start()
    return wd


def test_watchdog_stays_quiet_while_steps_come_and_fires_when_they_stop(tmp_path):
    steps = [0]
    wd = _watch(lambda: steps[0], stall_s=0.5, first_step_stall_s=5.0, out_dir=tmp_path)
    try:
        for _ in range(12):  # 1.2 s of steps every 0.1 s: longer than stall_s, never a gap of it
            time.sleep(0.1)
            steps[0] += 1
        assert wd.stall is None
        assert wd.finished.wait(5.0), "no stall declared after steps stopped"
    finally:
        wd.stop()
    assert wd.stall is not None and wd.stall.step == 12 and not wd.stall.first
    assert 0.5 <= wd.stall.waited_s < 2.0
    assert os.path.exists(tmp_path / watchdog.DUMP_NAME)
    assert "diagnose with: python -m harness diagnose" in wd.err.getvalue()  # 0.01 s: timed out
    assert not wd._thread.is_alive() and wd._thread.daemon and wd._thread.name == "dflash-watchdog"


def test_stall_s_zero_starts_no_thread(tmp_path):
    wd = _watch(lambda: 0, stall_s=0, first_step_stall_s=0.1, out_dir=tmp_path)
    assert wd._thread is None and wd.finished.is_set()
    time.sleep(0.3)
    assert wd.stall is None and not os.path.exists(tmp_path / watchdog.DUMP_NAME)


def test_threads_in_a_compile_are_compiling_and_channel_waiters_are_waiting():
    """A thread inside a Dynamo compile reads `compiling`; one running the compiled code does
    not; one blocked on a channel is `waiting` and named only in the headline's waiting list."""
    in_compile, in_call, release = threading.Event(), threading.Event(), threading.Event()
    compiled_once = threading.Event()

    def blocking_backend(gm, example_inputs):
        if compiled_once.is_set():
            in_compile.set()
            release.wait(30)

        def run(*args):
            if compiled_once.is_set():
                in_call.set()
                release.wait(30)
            return gm.forward(*args)

        return run

    fn = torch.compile(lambda x: x.sin() + 1, backend=blocking_backend)
    other = torch.compile(lambda x: x.cos() * 2, backend=blocking_backend)
    fn(torch.ones(3))  # compiled here, unblocked
    compiled_once.set()
    stop = threading.Event()
    chan = Channel("hidden", 1, stop, 0.05)
    threads = [
        threading.Thread(target=lambda: other(torch.ones(3)), name="dflash-train-0"),
        threading.Thread(target=lambda: fn(torch.ones(3)), name="dflash-train-1"),
        threading.Thread(target=lambda: _get_until_stop(chan), name="dflash-target-0"),
    ]
    for t in threads:
        t.start()
    try:
        assert in_compile.wait(60) and in_call.wait(60)
        time.sleep(0.2)  # the channel reader is in its wait loop
        snap = {w.name: w for w in stacks.snapshot(skip=(threading.get_ident(),))}
    finally:
        release.set()
        stop.set()
        for t in threads:
            t.join(30)
    assert snap["dflash-train-0"].compiling and not snap["dflash-train-0"].waiting
    assert snap["dflash-train-0"].where.startswith("test_watchdog:blocking_backend:")
    assert not snap["dflash-train-1"].compiling
    assert snap["dflash-train-1"].where.startswith("test_watchdog:run:")
    assert snap["dflash-target-0"].waiting and snap["dflash-target-0"].where.startswith("dflash.channel:get:")
    head = watchdog.headline(
        step=68,
        first=False,
        waited_s=300,
        limit_key="train.stall_s",
        limit_s=300,
        threads=tuple(snap.values()),
        dump_path="d.txt",
    )
    assert head.startswith(
        "STALLED: no training step for 300 s after step 68 (train.stall_s=300); compiling (Dynamo/Inductor frames"
    )
    assert "dflash-train-0 in test_watchdog:blocking_backend:" in head.split("; stuck: ")[0]
    assert "; stuck: dflash-train-1 in test_watchdog:run:" in head
    assert head.endswith("; waiting on them: dflash-target-0; dump: d.txt")


def _get_until_stop(chan: Channel) -> None:
    from dflash.trainer_errors import StageStopped

    try:
        chan.get()
    except StageStopped:
        pass


def test_innermost_meaningful_frame_skips_stdlib_and_helpers():
    ready, release = threading.Event(), threading.Event()

    def wait_in_stdlib():
        ready.set()
        release.wait(30)  # innermost frames: threading.Event.wait / Condition.wait (stdlib)

    t = threading.Thread(target=wait_in_stdlib, name="probe")
    t.start()
    try:
        assert ready.wait(10)
        time.sleep(0.05)
        where = stacks.of_threads([t])["probe"]
    finally:
        release.set()
        t.join(10)
    assert where.startswith("test_watchdog:wait_in_stdlib:")


@pytest.mark.slow
def test_the_harness_records_a_stall_the_trainer_reports_as_a_hang_keyed_by_its_dump(tmp_path):
    """Exit 4 is no crash: the runner reads the `failed` event's `stalled`, keeps the dump with the
    trial and keys the HANG by its threads (the stuck drafter thread among them), as a hang it had
    detected itself would be."""
    from harness.trial.folder import STALL_DUMP
    from harness.trial.outcome import Outcome
    from harness.trial.runner import run_trial
    from harness.trial.spec import TrialSpec, WorkloadSpec

    argv = tuple(train_argv(tmp_path / "run", "train.steps=50", "train.stall_s=2"))
    spec = TrialSpec(
        trial_id="stall/0",
        cell="stall",
        timeout_s=240,
        hang_s=120,
        workload=WorkloadSpec(kind="command", argv=argv),
        env={"HARNESS_FAULTS": STUCK_AFTER_STEP_1},
        cwd=str(tmp_path),
    )
    result = run_trial(spec, tmp_path / "trial")
    assert result.rc == watchdog.EXIT_STALLED and result.outcome is Outcome.HANG, result.detail
    assert result.detail.startswith("the workload stalled: no step for")
    assert (tmp_path / "trial" / STALL_DUMP).is_file()
    # The fault point's own frames are plumbing (harness.trial.frames.IGNORED_MODULES): the stuck
    # thread reads at the drafter loop that called it, its peers at the step barrier.
    assert "dflash-train@dflash.drafter_loop:run" in result.signature_summary, result.signature_summary
