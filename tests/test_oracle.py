"""The differential oracle turns a silent wrong value into a wrong result.

A `corrupt` fault at drafter.after_forward zeroes one thread's step output: finite numbers, no
exception, and without the oracle the run ends with exit 0. With train.oracle_every the eager
recomputation disagrees and the run ends as WRONG_RESULT (exit 3), in process, as
`python -m dflash train` and as a harness trial.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest
import torch
from small_run import REPO, small_cli_args, small_config, train_argv

from dflash.config import TrainConfig
from dflash.loss import LossOut
from dflash.oracle import Diff, compare
from dflash.step import StepResult
from dflash.train import train
from dflash.trainer_errors import WrongResult
from harness.runtime import failpoints as faults
from harness.trial.outcome import Outcome
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

ZERO_TRAIN_1 = "drafter.after_forward@dflash-train-1=corrupt"
ORACLE_ON = ["--set", "train.oracle_every=1"]


def _checked(tmp_path, **train_kw):
    return small_config(tmp_path / "run", oracle_every=1, **train_kw)


# ------------------------------------------------------------------------------- comparisons


def _loss_out(loss: float, correct=(3.0, 2.0, 1.0), counts=(8.0, 8.0, 7.0)) -> LossOut:
    return LossOut(
        loss=torch.tensor(loss),
        correct=torch.tensor(correct),
        counts=torch.tensor(counts),
        accept_sum=torch.tensor(0.0),
        num_blocks=torch.tensor(0.0),
    )


def _result(loss: float, correct=(3.0, 2.0, 1.0), counts=(8.0, 8.0, 7.0)) -> StepResult:
    out = _loss_out(loss, correct, counts)
    return StepResult(seq=5, loss=out.loss, correct=out.correct, counts=out.counts, tokens=10)


def test_the_tolerance_is_absolute_plus_relative_to_the_eager_loss():
    cfg = TrainConfig(oracle_rtol=1e-4, oracle_atol=1e-5)
    assert compare(_result(5.0004), _loss_out(5.0)).violation(cfg) is None  # 4e-4 <= 1e-5 + 5e-4
    why = compare(_result(5.001), _loss_out(5.0)).violation(cfg)
    assert why.startswith("loss 5.001 != eager 5 (|diff| 0.001 > 1e-05 + 0.0001 * |eager|)")
    assert compare(_result(0.0), _loss_out(5.0)).violation(cfg) is not None
    assert compare(_result(5e-6), _loss_out(0.0)).violation(cfg) is None  # atol near 0


def test_counts_must_agree_exactly_and_greedy_hits_within_the_flips_allowed():
    cfg = TrainConfig(oracle_flips=1)
    assert compare(_result(5.0, correct=(2.0, 2.0, 1.0)), _loss_out(5.0)).violation(cfg) is None
    why = compare(_result(5.0, correct=(2.0, 1.0, 1.0)), _loss_out(5.0)).violation(cfg)
    assert why == "2 greedy hits differ from eager (> 1)"
    why = compare(_result(5.0, counts=(8.0, 8.0, 6.0)), _loss_out(5.0)).violation(cfg)
    assert why == "label counts differ from eager (the step read other inputs)"


def test_a_nan_on_both_sides_is_left_to_the_nan_check():
    nan = float("nan")
    assert Diff(loss=nan, eager=nan, flips=0, counts_equal=True).violation(TrainConfig()) is None
    assert Diff(loss=nan, eager=5.0, flips=0, counts_equal=True).violation(TrainConfig()) is not None


# ----------------------------------------------------------------------------------- training


def test_a_clean_run_checks_every_step_of_every_thread(tmp_path):
    outcome = train(_checked(tmp_path))
    assert outcome.exit_code == 0, outcome.pipeline.report()
    oracle = outcome.final["oracle"]
    assert oracle["checked"] == 4 * 2 and oracle["max_flips"] == 0
    # Eager against itself: the same kernels, the same numbers.
    assert oracle["max_abs"] == 0.0


def test_the_oracle_is_off_by_default_and_says_so(tmp_path):
    outcome = train(small_config(tmp_path / "run"))
    assert outcome.exit_code == 0 and outcome.final["oracle"] is None


def test_a_corrupted_output_passes_silently_without_the_oracle(fault_env, tmp_path):
    fault_env(ZERO_TRAIN_1)
    outcome = train(small_config(tmp_path / "run"))
    assert outcome.exit_code == 0, outcome.pipeline.report()
    assert faults.current_plan().hits == {"drafter.after_forward": 4}


def test_the_oracle_turns_the_corrupted_output_into_a_wrong_result(fault_env, tmp_path):
    fault_env(ZERO_TRAIN_1)
    outcome = train(_checked(tmp_path))
    assert outcome.exit_code == 3
    first = outcome.pipeline.failures[0]
    assert isinstance(first.exc, WrongResult) and first.thread == "dflash-train-1"
    assert outcome.wrong_result.startswith("drafter step disagrees with its eager recomputation: loss 0 != eager ")
    assert outcome.wrong_result.endswith("at step 1 (batch 1, dflash-train-1)")
    assert not os.path.exists(tmp_path / "run" / "checkpoints"), "a wrong run wrote a checkpoint"


def test_a_sampled_step_catches_a_corruption_that_lands_on_it(fault_env, tmp_path):
    # Steps 0 and 2 are checked; the corruption is on the fourth forward of dflash-train-0 only
    # (step 3, not checked), so the run passes: what sampling buys and what it costs.
    fault_env("drafter.after_forward@dflash-train-0=3*off;drafter.after_forward@dflash-train-0=1*corrupt")
    outcome = train(small_config(tmp_path / "run", oracle_every=2))
    assert outcome.exit_code == 0 and outcome.final["oracle"]["checked"] == 2 * 2
    # The same rule one step earlier lands on a checked step.
    fault_env("drafter.after_forward@dflash-train-0=2*off;drafter.after_forward@dflash-train-0=1*corrupt")
    outcome = train(small_config(tmp_path / "run2", oracle_every=2))
    assert outcome.exit_code == 3 and "at step 3 (batch 4, dflash-train-0)" in outcome.wrong_result


def test_a_small_scaling_beyond_the_tolerance_is_caught(fault_env, tmp_path):
    fault_env("drafter.after_forward@dflash-train-0=corrupt(1.001)")
    outcome = train(_checked(tmp_path))
    assert outcome.exit_code == 3 and "(|diff| " in outcome.wrong_result


@pytest.mark.slow
def test_compiled_steps_agree_with_eager_and_the_corruption_is_caught(fault_env, tmp_path):
    """aot_eager compiles the real step (Dynamo + AOTAutograd) in each drafter thread. One
    target thread: two eager target forwards while a thread compiles are r19's race, another
    failure than the one this test is about."""
    torch._dynamo.reset()
    try:
        cfg = _checked(tmp_path)
        cfg = dataclasses.replace(
            cfg,
            compile=dataclasses.replace(cfg.compile, mode="default", backend="aot_eager"),
            pipeline=dataclasses.replace(cfg.pipeline, num_target_threads=1),
        )
        outcome = train(cfg)
        assert outcome.exit_code == 0, outcome.pipeline.report()
        assert outcome.final["oracle"]["checked"] == 8
        fault_env(ZERO_TRAIN_1)
        bad = train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out_dir=str(tmp_path / "bad"))))
        assert bad.exit_code == 3 and bad.pipeline.failures[0].thread == "dflash-train-1"
    finally:
        torch._dynamo.reset()


# ------------------------------------------------------------------- as the harness sees it


@pytest.mark.slow
def test_python_m_dflash_train_exits_3_with_a_wrong_result_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, HARNESS_FAULTS=ZERO_TRAIN_1)
    proc = subprocess.run(
        [*train_argv(tmp_path / "run"), *ORACLE_ON],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    wrong = [ln for ln in proc.stdout.splitlines() if ln.startswith("WRONG_RESULT: ")]
    assert len(wrong) == 1
    assert "drafter step disagrees with its eager recomputation: loss 0 != eager" in wrong[0]
    assert wrong[0] in proc.stderr.splitlines()


@pytest.mark.slow
def test_run_trial_classifies_it_as_wrong_result(tmp_path):
    spec = TrialSpec(
        trial_id="oracle/corrupt/0",
        cell="corrupt",
        timeout_s=300.0,
        hang_s=120.0,
        workload=WorkloadSpec(kind="dflash", argv=(*small_cli_args(str(tmp_path / "run")), *ORACLE_ON)),
        env={faults.ENV_PLAN: ZERO_TRAIN_1},
    )
    result = run_trial(spec, tmp_path / "trial")
    assert result.outcome is Outcome.WRONG_RESULT and result.rc == 3, result.detail
    assert result.exc_type == "WRONG_RESULT"
    assert result.detail.startswith(
        "WRONG_RESULT: drafter step disagrees with its eager recomputation: loss <int> != eager <float>"
    )
