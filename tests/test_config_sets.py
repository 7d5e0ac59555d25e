"""The bootstrap's record of the configs a program sets, by thread, and F14 named from it.

On torch 2.12+ a dynamo config override is thread-local (pytorch#186537): a recompile limit raised in
the main thread is not the training thread's, which hits the default (8). The warning alone is printed
by programs that recompile by design too; the record of who set what is the race's precondition."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness.diagnosis import diagnose
from harness.diagnosis.catalogue import major_minor
from harness.diagnosis.trial_failures import config_sets
from harness.trial.folder import CONFIG_SETS
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
PT186537 = ROOT / "tests" / "foreign" / "public" / "pt186537_backward_thread_config.py"


def test_config_sets_read_as_one_line_and_skip_torn_lines():
    raw = (
        '{"config": "torch._dynamo.config.recompile_limit", "value": "64", "thread": "MainThread"}\n'
        '{"config": "torch._inductor.config.max_autotune", "value": "True", "thread": "w-1"}\n{"config": "tor'
    )
    assert (
        config_sets(raw)
        == "MainThread: torch._dynamo.config.recompile_limit=64; w-1: torch._inductor.config.max_autotune=True"
    )
    assert config_sets("") == ""


def test_the_bootstrap_records_which_thread_set_a_config(tmp_path):
    """pytorch#186537's program under the runner: the limit it sets in the main thread (and in its
    training thread in phase 2) is recorded with the thread, and the default limit the training
    thread hits in phase 1 names F14 (torch 2.13: overrides are thread-local)."""
    spec = TrialSpec(
        trial_id="f14/0",
        cell="f14",
        timeout_s=240,
        hang_s=120,
        trial_index=0,
        cwd=str(ROOT),
        workload=WorkloadSpec(kind="command", argv=(sys.executable, str(PT186537))),
    )
    run_trial(spec, tmp_path)
    sets = config_sets((tmp_path / CONFIG_SETS).read_text())
    assert "MainThread: torch._dynamo.config.recompile_limit=64" in sets, sets
    assert "(train): torch._dynamo.config.recompile_limit=64" in sets, sets
    (finding,) = diagnose.diagnose(diagnose.collect([str(tmp_path)]))
    if tuple(map(int, major_minor(torch.__version__).split("."))) >= (2, 12):
        assert finding.race == "F14", finding.verdict()
