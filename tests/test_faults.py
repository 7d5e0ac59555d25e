"""Fault points: grammar, thread filter, counts, probability, chaining with the scheduler."""

from __future__ import annotations

import threading
from typing import NamedTuple

import pytest
import torch

from dflash import fault_points
from harness.runtime import failpoints as faults
from harness.runtime.errors import ConfigError, InjectedFault


@pytest.fixture(autouse=True)
def clean_faults():
    faults.clear()
    yield
    faults.clear()


def run_in_thread(name: str, fn):
    box: dict[str, BaseException] = {}

    def body():
        try:
            fn()
        except BaseException as exc:  # surfaced to the test below
            box["exc"] = exc

    t = threading.Thread(target=body, name=name)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), f"thread {name} did not finish"
    return box.get("exc")


def test_fault_point_is_noop_without_handler():
    for name in fault_points.POINTS:
        faults.fault_point(name)
    assert faults.measure_off_cost(1000) > 0


def test_raise_names_point_and_thread():
    faults.install_plan("drafter.before_step=raise")
    exc = run_in_thread("dflash-train-0", lambda: faults.fault_point("drafter.before_step"))
    assert isinstance(exc, InjectedFault)
    assert "drafter.before_step" in str(exc) and "dflash-train-0" in str(exc)


def test_thread_glob_limits_rule_to_matching_threads():
    faults.install_plan("target.before_put@dflash-target-1=raise")
    assert run_in_thread("dflash-target-0", lambda: faults.fault_point("target.before_put")) is None
    exc = run_in_thread("dflash-target-1", lambda: faults.fault_point("target.before_put"))
    assert isinstance(exc, InjectedFault)


def test_count_limits_how_often_task_runs():
    plan = faults.install_plan("gate.before_open=2*raise")
    raised = 0
    for _ in range(5):
        try:
            faults.fault_point("gate.before_open")
        except InjectedFault:
            raised += 1
    assert raised == 2 and plan.hits == {"gate.before_open": 2}


def test_other_points_untouched():
    faults.install_plan("gate.before_open=raise")
    faults.fault_point("drafter.after_step")


def fire_pattern(seed: int) -> list[bool]:
    faults.install_plan("drafter.after_step=30%raise", seed=seed)
    pattern = []
    for _ in range(200):
        try:
            faults.fault_point("drafter.after_step")
            pattern.append(False)
        except InjectedFault:
            pattern.append(True)
    return pattern


def test_probability_is_seeded_and_repeatable():
    a, b, c = fire_pattern(0), fire_pattern(0), fire_pattern(1)
    assert a == b and a != c
    assert 30 < sum(a) < 90  # 30% of 200, loose bounds


def test_delay_and_yield_and_off_do_not_raise():
    plan = faults.install_plan("drafter.after_get=delay(1);drafter.after_forward=yield;gate.before_open=off")
    for name in ("drafter.after_get", "drafter.after_forward", "gate.before_open"):
        faults.fault_point(name)
    assert plan.hits == {"drafter.after_get": 1, "drafter.after_forward": 1, "gate.before_open": 1}


def test_handler_and_env_plan_are_chained():
    seen: list[str] = []
    faults.set_handler(seen.append)
    faults.install_from_env({"HARNESS_FAULTS": "drafter.before_backward=raise", "HARNESS_FAULTS_SEED": "3"})
    with pytest.raises(InjectedFault):
        faults.fault_point("drafter.before_backward")
    faults.fault_point("drafter.after_backward")
    assert seen == ["drafter.before_backward", "drafter.after_backward"]
    faults.set_handler(None)
    with pytest.raises(InjectedFault):
        faults.fault_point("drafter.before_backward")


def test_install_from_env_unset_installs_nothing():
    assert faults.install_from_env({}) is None
    faults.fault_point("gate.before_open")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x", "invalid fault spec 'x': expected name"),
        ("gate.before_open=boom", "invalid fault spec 'gate.before_open=boom': unknown task 'boom'"),
        ("nope.point=raise", "unknown point 'nope.point'"),
        ("gate.before_open=150%raise", "must be between 0% and 100%"),
        ("gate.before_open=x%raise", "failed to parse frequency 'x%'"),
        ("gate.before_open=a*raise", "failed to parse count 'a*'"),
        ("gate.before_open=delay", "needs a duration in ms"),
        ("gate.before_open=delay(x)", "duration must be a number"),
        ("gate.before_open=yield(2)", "takes no argument"),
        ("drafter.after_backward=corrupt", "task 'corrupt' needs a point that holds a value"),
        ("drafter.after_forward=corrupt(x)", "corrupt(x): the factor must be a number"),
        ("drafter.after_forward=corrupt(nan)", "the factor must be finite"),
    ],
)
def test_parse_errors_are_specific(spec, message):
    with pytest.raises(ConfigError) as info:
        faults.parse_plan(spec)
    assert message in str(info.value)


def test_bad_seed_is_config_error():
    with pytest.raises(ConfigError, match="HARNESS_FAULTS_SEED"):
        faults.install_from_env({"HARNESS_FAULTS": "gate.before_open=raise", "HARNESS_FAULTS_SEED": "x"})


class Out(NamedTuple):
    loss: torch.Tensor
    ids: torch.Tensor


def test_corrupt_zeroes_floating_tensors_in_the_matching_thread_only():
    plan = faults.install_plan("drafter.after_forward@dflash-train-1=corrupt")
    w = torch.tensor(2.0, requires_grad=True)
    out = Out(loss=w * 3.0, ids=torch.tensor([4, 5]))
    assert faults.fault_value("drafter.after_forward", out) is out  # this thread: untouched
    got: list[Out] = []
    assert run_in_thread("dflash-train-1", lambda: got.append(faults.fault_value("drafter.after_forward", out))) is None
    (bad,) = got
    assert isinstance(bad, Out) and bad.loss.item() == 0.0 and bad.ids.tolist() == [4, 5]
    assert bad.loss.grad_fn is not None
    bad.loss.backward()  # the graph is kept: the backward runs, on the wrong numbers
    assert float(w.grad) == 0.0 and plan.hits == {"drafter.after_forward": 1}


def test_corrupt_takes_a_factor_and_counts_like_any_task():
    faults.install_plan("drafter.after_forward=1*corrupt(1.5)")
    x = torch.tensor([2.0])
    assert faults.fault_value("drafter.after_forward", x).tolist() == [3.0]
    assert faults.fault_value("drafter.after_forward", x) is x


def test_fault_value_runs_the_other_tasks_and_the_handler_as_fault_point_does():
    seen: list[str] = []
    faults.set_handler(seen.append)
    x = torch.tensor([1.0])
    assert faults.fault_value("drafter.after_forward", x) is x and seen == ["drafter.after_forward"]
    faults.install_plan("drafter.after_forward=raise")
    with pytest.raises(InjectedFault):
        faults.fault_value("drafter.after_forward", x)


def test_a_program_registers_its_own_points(monkeypatch):
    # A private registry: the trainer's points stay registered for the other tests.
    monkeypatch.setattr(faults, "_registered", {})
    with pytest.raises(ConfigError, match="none; a program names its own"):
        faults.parse_plan("serve.before_reply=raise")
    faults.register_points(["serve.before_reply", "serve.after_decode"], value_points=["serve.after_decode"])
    assert faults.registered_points() == ("serve.before_reply", "serve.after_decode")
    assert faults.registered_value_points() == ("serve.after_decode",)
    assert faults.parse_plan("serve.after_decode=corrupt")[0].task == "corrupt"
    with pytest.raises(ConfigError, match="unknown point 'drafter.before_step'"):
        faults.parse_plan("drafter.before_step=raise")


@pytest.mark.parametrize(
    ("names", "value_points", "message"),
    [(["nodot"], (), "not named stage.event"), (["a.b"], ("c.d",), "not among the points")],
)
def test_register_points_refuses_bad_names(monkeypatch, names, value_points, message):
    monkeypatch.setattr(faults, "_registered", {})
    with pytest.raises(ValueError, match=message):
        faults.register_points(names, value_points=value_points)
    assert faults.registered_points() == ()


def test_the_trainer_registers_its_points():
    assert set(fault_points.POINTS) <= set(faults.registered_points())
    assert faults.registered_value_points() == fault_points.VALUE_POINTS
