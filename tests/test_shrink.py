"""harness shrink: ablation of a failing trial's fault plan, against a stored trial."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.campaign import shrink
from harness.cli import main
from harness.faults.scheduler import Plan, Rule
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

SCRIPT = Path(__file__).parent / "scripts" / "needs_one_rule.py"


def _stored_failure(tmp_path: Path, plan: Plan | None) -> tuple[Path, str]:
    store = Store(tmp_path / "store")
    tid = "m/needs:raw@custom/0"
    spec = TrialSpec(
        trial_id=tid,
        cell="needs:raw@custom",
        timeout_s=60,
        hang_s=30,
        workload=WorkloadSpec(kind="command", argv=(sys.executable, str(SCRIPT))),
        plan=plan.to_dict() if plan else None,
    )
    result = run_trial(spec, store.artefacts_dir(tid))
    store.append(result)
    return store.root, tid


PLAN = Plan(
    seed=3,
    profile="custom",
    switch_interval=1e-3,
    rules=[
        Rule(point="prefetch.before_put", action="delay", params={"dist": "uniform", "max_s": 0.001}),
        Rule(point="drafter.before_forward", action="raise", params={"message": "injected"}),
    ],
)


def test_shrink_keeps_the_one_rule_the_failure_needs_and_writes_a_runnable_spec(tmp_path, capsys):
    store, tid = _stored_failure(tmp_path, PLAN)
    assert Store(store).load()[0].outcome is Outcome.CRASH
    assert main(["shrink", tid, "--store", str(store), "-n", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(s["label"], s["reproduced"], s["removed"]) for s in out["steps"]] == [
        ("full plan", 2, None),
        ("no plan at all", 0, None),
        ("without rule 1 (prefetch.before_put before delay p=1)", 2, True),
        ("without rule 2 (drafter.before_forward before raise p=1)", 0, False),
        ("without switch_interval=0.001", 2, True),
    ]
    assert out["minimal"] == "rule 2 (drafter.before_forward before raise p=1)"
    spec = TrialSpec.from_json(Path(out["spec"]).read_text())
    assert [r["action"] for r in spec.plan["rules"]] == ["raise"] and spec.plan["switch_interval"] is None
    # Every run is stored beside the matrix store, not in it.
    runs = Store(store / shrink.SHRINKS_NAME).load()
    assert len(runs) == 10 and {r.replay_of for r in runs} == {tid}
    assert [r.trial_id for r in Store(store).load()] == [tid]
    # The minimal spec runs as it is and fails the same way.
    assert main(["run", out["spec"], "--artefacts", str(tmp_path / "min")]) == 1


def test_shrink_refuses_a_trial_without_a_plan_or_one_that_passed(tmp_path, capsys):
    store, tid = _stored_failure(tmp_path, None)
    assert main(["shrink", tid, "--store", str(store)]) == 2
    assert "nothing to shrink" in capsys.readouterr().err
    assert main(["shrink", "no/such:trial@-/0", "--store", str(store)]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_failure_the_plan_does_not_cause_shrinks_to_no_plan(monkeypatch, tmp_path):
    # An oracle that reproduces with any plan, none included: the plan is not needed.
    record = TrialResult(trial_id="t", cell="c", trial_index=0, outcome=Outcome.CRASH, signature="s")
    shrinker = shrink.Shrinker.__new__(shrink.Shrinker)
    shrinker.record, shrinker.runs, shrinker.stream = record, 4, sys.stderr
    shrinker.spec = TrialSpec(
        trial_id="t", cell="c", workload=WorkloadSpec(kind="command", argv=("x",)), plan=PLAN.to_dict()
    )
    monkeypatch.setattr(shrinker, "measure", lambda plan: 3, raising=False)
    steps = shrinker.run()
    assert [s.label for s in steps] == ["full plan", "no plan at all"]
    plan, measured = shrink.minimal_plan(steps)
    assert plan is None and measured.reproduced == 3


@pytest.mark.parametrize("k, baseline, ok", [(1, 1, True), (0, 1, False), (2, 4, True), (1, 4, False), (3, 5, True)])
def test_a_candidate_still_reproduces_at_half_the_baseline_rate(k, baseline, ok):
    assert shrink.enough(k, baseline) is ok


def test_without_removes_exactly_the_named_components_and_describe_names_the_rest():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    points = ["prefetch.before_put", "drafter.before_forward", "target.after_get"]
    rule = st.builds(
        lambda p, a, pr: {"point": p, "action": a, "when": "before", "probability": pr},
        st.sampled_from(points),
        st.sampled_from(["delay", "yield"]),
        st.sampled_from([0.1, 0.5, 1.0]),
    )
    plans = st.builds(
        lambda rules, sw: {"seed": 1, "profile": "p", "rules": rules, "switch_interval": sw, "start_barrier": None},
        st.lists(rule, max_size=4),  # identical rules too: components are keyed by index
        st.sampled_from([None, 1e-6]),
    )

    @settings(max_examples=60, deadline=None)
    @given(plans, st.data())
    def check(plan, data):
        comps = shrink.components(plan)
        drop = set(data.draw(st.lists(st.sampled_from([k for k, _ in comps] or ["none"]), unique=True)))
        smaller = shrink.without(plan, drop)
        assert len(smaller["rules"]) == len(plan["rules"]) - len([k for k in drop if k.startswith("rule")])
        assert (smaller["switch_interval"] is None) == ("switch" in drop or plan["switch_interval"] is None)
        left = [label for key, label in comps if key not in drop]
        step = shrink.Step(label="x", plan=smaller, reproduced=1, runs=1, kept=True, removed=frozenset(drop))
        assert shrink.describe(plan, step) == (", ".join(left) or "an empty plan (seed only)")

    check()
