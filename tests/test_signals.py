"""SIGTERM ends a run within 10 s even while a stage thread is stuck where no stop event reaches it
(a busy Python loop, as a long compile is): checkpoint written, the stuck thread named with its
frame, exit 143 without waiting for it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from small_run import REPO, start_trainer, train_argv

from dflash import checkpoint

SIGNAL_DEADLINE_S = 10.0
# spin: holds the GIL between switch intervals and never looks at the stop event, for 60 s.
STUCK_AFTER_STEP_1 = "drafter.after_step@dflash-train-1=1*spin(60000)"


@pytest.mark.slow
def test_sigterm_with_a_stuck_thread_exits_143_within_10s_with_checkpoint(tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=REPO, HARNESS_FAULTS=STUCK_AFTER_STEP_1)
    argv = train_argv(run, "train.steps=50", "train.log_interval_s=0")
    proc = start_trainer(argv, tmp_path, env)
    err_text: list[str] = []
    reader = threading.Thread(target=lambda: err_text.append(proc.stderr.read()), name="test-err")
    reader.start()
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # one metrics line per step (log_interval_s=0)
            if line.startswith("{") and json.loads(line).get("step", 0) >= 1:
                break
            assert time.monotonic() < deadline, "no step within 120 s"
        time.sleep(0.5)  # dflash-train-1 is spinning now; the step counter stays at 1
        assert proc.poll() is None
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.stdout.read()
        proc.wait(timeout=30)
        took = time.monotonic() - t_sig
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(10)
    err = "".join(err_text)
    assert proc.returncode == 143, err[-3000:]
    assert took < SIGNAL_DEADLINE_S, f"took {took:.1f} s"
    assert "=== threads still alive after the shutdown deadline: dflash-train-1 ===" in err
    assert "  dflash-train-1 in harness.runtime.failpoints:_perform:" in err
    assert "stopped by signal: checkpoint written to" in err, err[-3000:]
    ck = checkpoint.load(str(run))
    assert ck.step == 1 and ck.data_seq == 2
