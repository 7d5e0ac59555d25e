"""Scheduler plans, decisions, budget, replay determinism and the child bootstrap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.faults.profiles import PROFILES, plan_from_seed
from harness.faults.scheduler import (
    STARVE_MS,
    InvalidPlan,
    Plan,
    Rule,
    Scheduler,
    StartBarrier,
    decisions,
)

REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = REPO / "harness" / "trial" / "bootstrap"


class FakeTime:
    """Clock that advances only when the scheduler sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _sched(plan: Plan, tmp_path: Path, name: str = "log.jsonl", ft: FakeTime | None = None):
    ft = ft or FakeTime()
    return Scheduler(plan, log_path=str(tmp_path / name), clock=ft.clock, sleep=ft.sleep), ft


def _drive(sched: Scheduler, points: list[str], rounds: int) -> None:
    for _ in range(rounds):
        for p in points:
            sched.hit(p, "before")
            sched.hit(p, "after")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_same_seed_gives_same_plan_and_json_round_trips(profile):
    a, b = plan_from_seed(7, profile), plan_from_seed(7, profile)
    assert a == b
    assert Plan.from_json(a.to_json()) == a
    assert a.profile == profile and a.seed == 7


def test_seeds_pick_different_parameters():
    plans = {plan_from_seed(s, "compile-chaos").to_json() for s in range(20)}
    assert len(plans) > 1


def test_profiles_say_what_they_do():
    assert plan_from_seed(1, "plain").rules == [] and plan_from_seed(1, "plain").switch_interval is None
    assert plan_from_seed(1, "switch").switch_interval == 1e-6
    widen = plan_from_seed(1, "fx-widen")
    assert {r.point for r in widen.rules} == {"fx.trace", "fx.create_node", "compiled.call"}
    raise_at = plan_from_seed(1, "raise-at")
    assert [r.action for r in raise_at.rules] == ["raise"] and raise_at.rules[0].max_hits == 1


@pytest.mark.parametrize(
    "rule, message",
    [
        ({"point": "fx.nope", "action": "delay", "params": {"max_s": 0.1}}, "unknown point 'fx.nope'"),
        ({"point": "fx.trace", "action": "explode"}, "unknown action 'explode'"),
        ({"point": "fx.trace", "action": "yield", "probability": 1.5}, "bad probability 1.5"),
        ({"point": "fx.trace", "action": "delay", "params": {"dist": "pareto"}}, "unknown delay dist"),
        ({"point": "fx.trace", "action": "delay", "params": {}}, "needs max_s"),
        ({"point": "gate.before_open", "action": "yield", "when": "after"}, "no 'after' side"),
        ({"point": "fx.trace", "action": "yield", "colour": "red"}, "bad plan field"),
    ],
)
def test_invalid_plan_says_why(rule, message):
    with pytest.raises(InvalidPlan, match=message):
        Plan.from_dict({"seed": 1, "rules": [rule]})


def test_invalid_plan_json_and_profile():
    with pytest.raises(InvalidPlan, match="not valid JSON"):
        Plan.from_json("{seed: 1")
    with pytest.raises(InvalidPlan, match="unknown profile 'nope'"):
        plan_from_seed(1, "nope")
    with pytest.raises(InvalidPlan, match="start_barrier"):
        Plan(seed=1, start_barrier=StartBarrier(threads="*", count=0)).validate()


def test_same_seed_same_decision_sequence_single_thread(tmp_path):
    plan = Plan.from_dict(
        {
            "seed": 3,
            "rules": [
                {"point": "fx.trace", "action": "delay", "probability": 0.5, "params": {"max_s": 0.01}},
                {"point": "fx.create_node", "action": "yield", "when": "after", "probability": 0.3},
            ],
        }
    )
    runs = []
    for name in ("a.jsonl", "b.jsonl"):
        sched, _ = _sched(plan, tmp_path, name)
        _drive(sched, ["fx.trace", "fx.create_node"], 50)
        sched.close()
        runs.append(decisions(str(tmp_path / name)))
    assert runs[0] == runs[1]
    assert 10 < len(runs[0]) < 90  # probabilities really applied: neither none nor all
    other, _ = _sched(Plan.from_dict({**plan.to_dict(), "seed": 4}), tmp_path, "c.jsonl")
    _drive(other, ["fx.trace", "fx.create_node"], 50)
    other.close()
    assert decisions(str(tmp_path / "c.jsonl")) != runs[0]


def test_budget_caps_injected_time_and_counts_skips(tmp_path):
    plan = Plan(seed=1, budget_fraction=0.2, rules=[Rule(point="fx.trace", action="delay", params={"max_s": 0.4})])
    sched, ft = _sched(plan, tmp_path)
    for _ in range(200):
        sched.hit("fx.trace")
        ft.now += 0.01  # 10 ms of real work between hits
    work_s = 200 * 0.01
    assert sched.num_skipped_budget > 0
    assert sched.injected_s <= 0.2 * (work_s + sched.injected_s) + 0.5 + 1e-9
    sched.close()
    summary = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert summary["skipped_budget"] == sched.num_skipped_budget


def test_starve_only_hits_low_priority_threads(tmp_path):
    rule = Rule(point="compiled.call", action="starve", params={"thread_p": 0.5, "max_ms": 64})
    plan = Plan(seed=11, rules=[rule], budget_fraction=1.0)
    sched, ft = _sched(plan, tmp_path)
    starved = set()
    for i in range(40):
        name = f"worker-{i}"
        sched._apply(0, rule, "compiled.call", "before", name, 1)
        if ft.slept:
            starved.add(name)
            assert ft.slept[-1] * 1000 in [ms for ms in STARVE_MS if ms <= 64]
            ft.slept.clear()
    assert 5 < len(starved) < 35  # about half the threads are low priority


def test_starve_victim_is_the_kth_thread_to_arrive(tmp_path):
    rule = Rule(point="fx.trace", action="starve", params={"thread_p": 0.0, "victim": 2, "max_ms": 4})
    plan = Plan(seed=1, rules=[rule], budget_fraction=1.0)
    sched, ft = _sched(plan, tmp_path)
    for name in ("first", "second", "third", "second"):
        ft.slept.clear()
        sched._apply(0, rule, "fx.trace", "before", name, 1)
        assert bool(ft.slept) == (name == "second")


def test_raise_fires_once_at_the_chosen_hit(tmp_path):
    plan = Plan(
        seed=1,
        rules=[Rule(point="drafter.before_step", action="raise", first_hit=3, max_hits=1, params={"message": "boom"})],
    )
    sched, _ = _sched(plan, tmp_path)
    sched.stage_handler("drafter.before_step")
    sched.stage_handler("drafter.before_step")
    with pytest.raises(RuntimeError, match="boom"):
        sched.stage_handler("drafter.before_step")
    for _ in range(5):
        sched.stage_handler("drafter.before_step")
    assert sched.num_injected == 1 and sched.hits["drafter.before_step"] == 8


def test_thread_glob_limits_rules(tmp_path):
    plan = Plan(seed=1, rules=[Rule(point="fx.trace", action="yield", threads="dflash-train-*")])
    sched, _ = _sched(plan, tmp_path)
    sched.hit("fx.trace")  # MainThread: not matched
    assert sched.num_injected == 0


def _child(code: str, env_extra: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["PYTHONPATH"] = f"{BOOTSTRAP}{os.pathsep}{REPO}"
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


PROBE = """
    import sys, json, torch, torch.fx._symbolic_trace as st, torch._dynamo
    import harness.runtime.failpoints as faults
    print(json.dumps({
        "harness_imported": "harness.faults.scheduler" in sys.modules,
        "trace_wrapped": hasattr(st.Tracer.trace, "__harness_point__"),
        "reset_wrapped": hasattr(torch._dynamo.reset, "__harness_point__"),
        "handler": faults._handler is not None,
        "switch": sys.getswitchinterval(),
    }))
"""


def test_off_by_default_nothing_imported_or_patched():
    proc = _child(PROBE, {})
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state == {
        "harness_imported": False,
        "trace_wrapped": False,
        "reset_wrapped": False,
        "handler": False,
        "switch": 0.005,
    }
    assert "HARNESS_PLAN" not in proc.stderr


def test_plan_in_env_installs_points_handler_and_switch(tmp_path):
    plan = Plan(
        seed=5,
        profile="t",
        switch_interval=1e-5,
        rules=[Rule(point="fx.trace", action="yield"), Rule(point="dynamo.reset", action="yield")],
    )
    (tmp_path / "plan.json").write_text(plan.to_json())
    proc = _child(PROBE, {"HARNESS_PLAN": str(tmp_path / "plan.json"), "HARNESS_PLAN_LOG": str(tmp_path / "log.jsonl")})
    assert proc.returncode == 0, proc.stderr
    assert "HARNESS_PLAN seed=5 profile=t" in proc.stderr
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state.pop("switch") == pytest.approx(1e-5)  # stored as a whole number of ns
    assert state == {"harness_imported": True, "trace_wrapped": True, "reset_wrapped": True, "handler": True}
    summary = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert set(summary["installed"]) == {"fx.trace", "dynamo.reset"} and summary["not_installed"] == []


def test_bad_plan_in_env_is_one_line_and_exit_2():
    proc = _child("print('ran')", {"HARNESS_PLAN": '{"seed": 1, "rules": [{"point": "x.y", "action": "yield"}]}'})
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert proc.stderr.startswith("HARNESS_PLAN error: unknown point 'x.y'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bootstrap_does_not_break_a_program_without_torch(tmp_path):
    plan = plan_from_seed(1, "fx-widen")
    proc = _child("import sys; print('torch' in sys.modules)", {"HARNESS_PLAN": plan.to_json()})
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


TRACE_WORKLOAD = """
    import torch, torch.nn as nn
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    for _ in range(20):
        torch.fx.symbolic_trace(m)
"""


def test_replay_in_child_repeats_decisions_single_thread(tmp_path):
    plan = Plan.from_dict(
        {
            "seed": 9,
            "profile": "t",
            "budget_fraction": 1.0,
            "rules": [
                {"point": "fx.trace", "action": "delay", "probability": 0.5, "params": {"max_s": 0.002}},
                {"point": "fx.create_node", "action": "yield", "probability": 0.2},
            ],
        }
    )
    logs = []
    for i in range(2):
        log = tmp_path / f"log{i}.jsonl"
        proc = _child(TRACE_WORKLOAD, {"HARNESS_PLAN": plan.to_json(), "HARNESS_PLAN_LOG": str(log)})
        assert proc.returncode == 0, proc.stderr
        logs.append(decisions(str(log)))
    assert logs[0] == logs[1] and len(logs[0]) > 5


BARRIER = """
    import threading, time, json
    from harness.faults.scheduler import Plan, StartBarrier, Scheduler, _install_start_barrier
    plan = Plan(seed=1, start_barrier=StartBarrier(threads="w-*", count=COUNT, timeout_s=1.0))
    _install_start_barrier(plan.start_barrier, Scheduler(plan))
    started = {}
    def body(): started[threading.current_thread().name] = time.monotonic()
    ts = []
    t0 = time.monotonic()
    for i in range(2):
        t = threading.Thread(target=body, name=f"w-{i}"); t.start(); ts.append(t)
        time.sleep(0.3)
    for t in ts: t.join()
    print(json.dumps({"spread": abs(started["w-0"] - started["w-1"]), "total": time.monotonic() - t0}))
"""


@pytest.mark.parametrize("count, released_together", [(2, True), (3, False)])
def test_start_barrier_releases_together_or_times_out(count, released_together):
    proc = _child(BARRIER.replace("COUNT", str(count)), {})
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if released_together:
        assert res["spread"] < 0.1  # w-0 waited for w-1 (started 0.3 s later)
    else:
        assert 0.9 < res["total"] < 5  # a missing third thread costs the timeout, no deadlock


def test_stage_points_reach_the_scheduler_through_dflash_faults(tmp_path):
    plan = Plan(
        seed=2,
        profile="t",
        rules=[Rule(point="drafter.before_step", action="raise", first_hit=2, max_hits=1, params={"message": "m"})],
    )
    code = """
        import harness.runtime.failpoints as faults
        from harness.runtime.errors import InjectedFault
        faults.fault_point("drafter.before_step")
        try:
            faults.fault_point("drafter.before_step")
        except InjectedFault as e:
            print("raised", e)
    """
    log = tmp_path / "log.jsonl"
    proc = _child(code, {"HARNESS_PLAN": plan.to_json(), "HARNESS_PLAN_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "raised m"
    assert decisions(str(log)) == [("drafter.before_step", "before", "MainThread", 2, 0, "raise", 0.0)]


def test_a_programs_own_points_come_from_the_module_its_plan_names(tmp_path):
    """The scheduler knows torch's points and the points a module registers; the plan names that
    module, so a program's own `stage.event` points work as the trainer's do, and the scheduler
    imports no program (the trainer included) for a plan that names none of its points."""
    (tmp_path / "shop_points.py").write_text(
        "from harness.runtime.failpoints import register_points\nregister_points(('shop.before_pay',))\n"
    )
    rule = Rule(point="shop.before_pay", action="raise", max_hits=1, params={"message": "paid twice"})
    code = """
        import sys
        import harness.runtime.failpoints as faults
        from harness.runtime.errors import InjectedFault
        try:
            faults.fault_point("shop.before_pay")
        except InjectedFault as e:
            print("raised", e, "dflash" in sys.modules)
    """
    env = {"PYTHONPATH": f"{BOOTSTRAP}{os.pathsep}{REPO}{os.pathsep}{tmp_path}"}
    plan = Plan(seed=1, rules=[rule], points_from=("shop_points",))
    proc = _child(code, {**env, "HARNESS_PLAN": plan.to_json()})
    assert proc.returncode == 0 and proc.stdout.strip() == "raised paid twice False", proc.stderr
    unnamed = json.loads(plan.to_json()) | {"points_from": []}
    proc = _child(code, {**env, "HARNESS_PLAN": json.dumps(unnamed)})
    assert proc.returncode == 2 and "unknown point 'shop.before_pay'" in proc.stderr
    torch_only = Plan(seed=1, rules=[Rule(point="fx.trace", action="yield")]).to_json()
    proc = _child("import sys; print('dflash' in sys.modules)", {"HARNESS_PLAN": torch_only})
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_bootstrap_still_runs_a_shadowed_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE_RAN'] = '1'\n")
    proc = _child(
        "import os; print(os.environ.get('OTHER_SITE_RAN'))",
        {"PYTHONPATH": f"{BOOTSTRAP}{os.pathsep}{REPO}{os.pathsep}{tmp_path}"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
