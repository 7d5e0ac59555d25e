"""Shutdown: SIGINT/SIGTERM stop at a step boundary with a checkpoint (exit 130/143); threads
that outlive the join deadline are reported; a normal run leaves no stage thread behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from small_run import REPO, end_of_run, small_config, stage_threads, start_trainer, train_argv

from dflash import checkpoint
from dflash.train import Trainer
from harness.runtime import failpoints as faults

SLOW_STEPS = "drafter.after_step=delay(10)"


def _signal_when(trainer: Trainer, sig: int, min_step: int) -> threading.Thread:
    def body():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            group = trainer.pipeline.group if trainer.pipeline is not None else None
            if group is not None and group.step >= min_step:
                os.kill(os.getpid(), sig)
                return
            time.sleep(0.01)

    t = threading.Thread(target=body, name="test-signal-sender")
    t.start()
    return t


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_at_step_boundary_with_checkpoint(sig, code, tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV_PLAN, SLOW_STEPS)
    before = stage_threads()
    trainer = Trainer(small_config(tmp_path / "run", steps=10_000), handle_signals=True)
    sender = _signal_when(trainer, sig, min_step=2)
    try:
        outcome = trainer.run()
    finally:
        sender.join(5)
        faults.clear()
    assert outcome.exit_code == code
    assert outcome.pipeline.ok
    ck = checkpoint.load(str(tmp_path / "run"))
    assert 2 <= ck.step < 10_000
    assert ck.step == trainer.pipeline.group.step
    assert ck.data_seq == ck.step * 2
    assert stage_threads() == before
    assert signal.getsignal(sig) is not trainer.signals._handle  # handlers restored


def test_thread_alive_after_deadline_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(
        faults.ENV_PLAN,
        "drafter.before_compile@dflash-train-1=1*delay(3000);drafter.before_compile@dflash-train-0=1*raise",
    )
    cfg = small_config(tmp_path / "run")
    cfg.pipeline.shutdown_deadline_s = 0.3
    try:
        outcome = Trainer(cfg).run()
        returned = time.monotonic()
    finally:
        end_of_run()
    assert outcome.exit_code == 1
    assert outcome.pipeline.alive == ["dflash-train-1"]
    assert returned - outcome.pipeline.failures[0].at < 2.5  # did not wait for the sleeper
    report = outcome.pipeline.report()
    assert "=== thread dflash-train-0 failed: InjectedFault" in report
    assert "still alive after the shutdown deadline: dflash-train-1" in report


@pytest.mark.slow
def test_sigterm_subprocess_exit_143_and_heartbeat(tmp_path):
    """The real process contract: heartbeat file, SIGTERM, checkpoint, exit 143."""
    hb = tmp_path / "heartbeat"
    env = dict(os.environ, PYTHONPATH=REPO, HARNESS_HEARTBEAT=str(hb), HARNESS_FAULTS=SLOW_STEPS)
    argv = train_argv(tmp_path / "run", "train.steps=100000", "train.log_interval_s=0.2")
    proc = start_trainer(argv, tmp_path, env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if hb.exists() and int(hb.read_text().split()[0]) > 20:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - t_sig < 10
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by signal: checkpoint written" in err
    metrics = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert metrics and all(m["event"] == "metrics" for m in metrics)
    assert checkpoint.load(str(tmp_path / "run")).step >= 1
