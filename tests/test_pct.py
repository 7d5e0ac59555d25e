"""PCT over the named points: plan data, priorities, change points, bounded waits, the profiles,
the lift's calibration and bound, and `harness replay` repeating a PCT trial's decisions."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.campaign import calibration, lift
from harness.cli import main
from harness.faults import pct
from harness.faults.pct import Pct, PctEngine, change_steps, initial_priority
from harness.faults.profiles import PCT_STEPS, plan_from_seed
from harness.faults.scheduler import InvalidPlan, Plan, Scheduler
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

SEED = 5


def _engine(depth: int = 1, steps: int = 10**9, **kw) -> tuple[PctEngine, list[dict]]:
    records: list[dict] = []
    return PctEngine(Pct(depth=depth, steps=steps, **kw), SEED, log=records.append, elapsed=lambda: 0.0), records


def _ranked(depth: int = 1) -> tuple[str, str]:
    """(high, low): two thread names whose priorities under SEED come in that order."""
    a, b = sorted(("t-a", "t-b"), key=lambda n: initial_priority(SEED, depth, n), reverse=True)
    return a, b


def _spin(eng: PctEngine, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        eng.step("fx.create_node", "before")


def _thread(name: str, fn) -> threading.Thread:
    t = threading.Thread(target=fn, name=name)
    t.start()
    return t


def _waits(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("action") == "pct-wait"]


@pytest.mark.parametrize("profile, depth", [("pct1", 1), ("pct2", 2), ("pct3", 3), ("pct-count", 0)])
def test_pct_profiles_are_plain_data_with_their_depth(profile, depth):
    plan = plan_from_seed(3, profile)
    assert plan.pct.depth == depth and plan.rules == [] and plan.switch_interval is None
    assert plan.pct.steps == (PCT_STEPS if depth else 1) and plan.pct.pinned is None
    assert Plan.from_json(plan.to_json()) == plan
    assert "fx.create_node" in plan.torch_points() and "dynamo.reset" in plan.torch_points()


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"depth": 9, "steps": 10}, "depth"),
        ({"depth": 1, "steps": 0}, "steps"),
        ({"depth": 1, "steps": 10, "idle_s": 1.0, "wait_s": 0.1}, "idle_s"),
        ({"depth": 1, "steps": 10, "points": ["fx.nope"]}, "unknown point"),
        ({"depth": 1, "steps": 10, "pinned": [["t", "fx.trace", "before"]]}, "pinned"),
        ({"depth": 1, "steps": 10, "colour": "red"}, "bad plan field"),
    ],
)
def test_invalid_pct_is_an_invalid_plan(bad, message):
    with pytest.raises(InvalidPlan, match=message):
        Plan.from_dict({"seed": 1, "pct": bad})


def test_priorities_and_change_points_come_from_the_seed():
    assert initial_priority(1, 2, "A") == initial_priority(1, 2, "A")
    prios = {initial_priority(1, 3, f"t{i}") for i in range(50)}
    assert len(prios) == 50 and all(3 <= p < 4 for p in prios)  # distinct, above change priorities 1..2
    steps = change_steps(7, 3, 100)
    assert steps == change_steps(7, 3, 100) and len(set(steps)) == 2 and all(1 <= s <= 100 for s in steps)
    assert change_steps(7, 1, 100) == [] and change_steps(7, 4, 2) != []
    assert {tuple(change_steps(s, 2, 1000)) for s in range(30)} != {tuple(steps[:1])}


def test_bound_is_one_over_n_k_to_the_d_minus_one():
    assert pct.bound(2, 1000, 1) == 0.5
    assert pct.bound(2, 1000, 2) == pytest.approx(5e-4)
    assert pct.bound(3, 100, 3) == pytest.approx(1 / 30_000)


def test_lower_thread_waits_while_a_higher_one_runs_and_goes_when_it_ends():
    eng, records = _engine(wait_s=5.0, idle_s=0.05)
    high, low = _ranked()
    h = _thread(high, lambda: _spin(eng, 0.3))
    time.sleep(0.05)
    t0 = time.monotonic()
    _thread(low, lambda: eng.step("fx.trace", "before")).join()
    h.join()
    (wait,) = _waits(records)
    assert wait["thread"] == low and wait["value"] == high and wait["released"] == "free"
    assert 0.15 < time.monotonic() - t0 < 2.0  # held until the higher thread ended, not to wait_s


def test_a_wait_never_exceeds_wait_s():
    eng, records = _engine(wait_s=0.2, idle_s=0.05)
    high, low = _ranked()
    h = _thread(high, lambda: _spin(eng, 1.0))
    time.sleep(0.05)
    _thread(low, lambda: eng.step("fx.trace", "before")).join()
    h.join()
    (wait,) = _waits(records)
    assert wait["released"] == "timeout" and 0.2 <= wait["waited_s"] < 0.6
    assert eng.summary()["timeouts"] == 1


def test_a_quiet_higher_thread_is_not_runnable():
    # A higher thread that stopped hitting points (asleep, blocked in torch, joined) holds nobody.
    eng, records = _engine(wait_s=5.0, idle_s=0.02)
    high, low = _ranked()
    h = _thread(high, lambda: (eng.step("fx.trace", "before"), time.sleep(0.5)))
    time.sleep(0.1)
    t0 = time.monotonic()
    _thread(low, lambda: eng.step("fx.trace", "before")).join()
    assert time.monotonic() - t0 < 0.3 and _waits(records) == []
    h.join()


def test_lower_thread_in_a_threads_glob_only():
    eng, records = _engine(wait_s=5.0, threads="t-*")
    high, _ = _ranked()
    h = _thread(high, lambda: _spin(eng, 0.3))
    time.sleep(0.05)
    _thread("other", lambda: eng.step("fx.trace", "before")).join()  # not taking part: never waits
    h.join()
    assert _waits(records) == [] and eng.summary()["threads"] == [high]


def test_change_point_drops_the_thread_below_every_other():
    k = 50
    (step,) = change_steps(SEED, 2, k)
    eng, records = _engine(depth=2, steps=k)
    for _ in range(k):
        eng.step("fx.trace", "before")
    (change,) = [r for r in records if r.get("action") == "pct-change"]
    assert change["step"] == step and change["hit"] == step and change["value"] == 1
    assert change["thread"] == threading.current_thread().name


def test_pinned_changes_replace_the_drawn_steps():
    me = threading.current_thread().name
    eng, records = _engine(depth=3, steps=10, pinned=[[me, "fx.trace", "after", 4, 2]])
    for _ in range(10):
        eng.step("fx.trace", "before")
        eng.step("fx.trace", "after")
    changes = [r for r in records if r.get("action") == "pct-change"]
    assert [(c["point"], c["when"], c["hit"], c["value"]) for c in changes] == [("fx.trace", "after", 4, 2)]
    none, records = _engine(depth=3, steps=10, pinned=[])  # an original that made no change
    for _ in range(10):
        none.step("fx.trace", "before")
    assert not [r for r in records if r.get("action") == "pct-change"]


def test_nobody_waits_after_step_k():
    eng, records = _engine(steps=5, wait_s=5.0)
    high, low = _ranked()
    h = _thread(high, lambda: _spin(eng, 0.3))
    time.sleep(0.05)  # the higher thread has made far more than 5 steps by now
    _thread(low, lambda: eng.step("fx.trace", "before")).join()
    h.join()
    assert _waits(records) == []


def test_depth_zero_counts_steps_and_threads_only():
    eng, records = _engine(depth=0, steps=1)
    for _ in range(7):
        eng.step("compiled.call", "before")
    _thread("w", lambda: eng.step("fx.trace", "before")).join()
    assert [r for r in records if "action" in r] == []
    assert eng.summary()["steps"] == 8 and len(eng.summary()["threads"]) == 2


def test_scheduler_runs_the_pct_engine_at_its_points(tmp_path):
    plan = Plan(seed=SEED, pct=Pct(depth=2, steps=3, points=["fx.trace"]))
    sched = Scheduler(plan, log_path=str(tmp_path / "log.jsonl"))
    for _ in range(4):
        sched.hit("fx.trace", "before")
        sched.hit("fx.create_node", "before")  # not one of this plan's pct points
        sched.hit("fx.trace", "raise")  # a raising call is no step
    sched.close()
    summary = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert summary["pct"]["steps"] == 4
    assert "pct(d=2,k=3)" in plan.describe()


# ---------------------------------------------------------------------------------------------
# The lift: calibration, the bound column, pct against switch.


def _result(i: int, outcome: Outcome = Outcome.OK, duration: float = 10.0) -> TrialResult:
    return TrialResult(
        trial_id=f"x-{i}",
        cell="c",
        trial_index=i,
        outcome=outcome,
        duration_s=duration,
        time_to_failure_s=duration if outcome.is_failure else None,
    )


def test_calibration_takes_the_median_of_counting_runs_or_the_stated_default():
    cal = calibration.calibrate(
        [
            {"steps": 100, "threads": ["a", "b"]},
            None,
            {"steps": 300, "threads": ["a", "b", "c"]},
            {"steps": 200, "threads": ["a", "b"]},
        ]
    )
    assert (cal.k, cal.n, cal.steps) == (200, 2, [100, 300, 200]) and cal.source.startswith("measured")
    default = calibration.calibrate([None])
    assert (default.k, default.n, default.source) == (PCT_STEPS, 2, "stated default")
    assert lift.plan_for("pct2", 4, cal)["pct"]["steps"] == 200  # the trial's plan carries k
    assert lift.plan_for("pct-count", 4, cal)["pct"]["steps"] == 1 and lift.plan_for("plain", 4, cal) is None


def test_lift_table_prints_the_pct_bound_and_ttff_and_judges_pct_against_switch():
    def cell(profile, hits):
        return lift.Cell(
            target="F2",
            profile=profile,
            results=[_result(i, Outcome.CRASH if h else Outcome.OK) for i, h in enumerate(hits)],
            hits=list(hits),
            pct=[None] * len(hits),
        )

    cells = [
        cell("plain", [False] * 20),
        cell("switch", [True] * 2 + [False] * 18),
        cell("pct1", [True] * 19 + [False]),
        cell("pct2", [False] * 20),
    ]
    cals = {"F2": calibration.Calibration(k=1000, n=2)}
    table = lift.format_table(cells, cals)
    rows = {line.split()[1]: line.split() for line in table.splitlines()[1:]}
    assert rows["pct1"][-1] == "0.5" and rows["pct2"][-1] == "0.0005" and rows["switch"][-1] == "-"
    assert rows["pct1"][-2] == "10.0" and rows["plain"][-2] == "-"  # 19/20: the first trial fails
    assert lift.pct_versus(cells, "F2").startswith(
        "F2: best pct (pct1) 19/20"
    ) and " beats switch 2/20" in lift.pct_versus(cells, "F2")
    data = lift.to_json(cells, cals, {"command": "x"})
    assert data["calibration"]["F2"]["k"] == 1000
    assert [c["pct_bound"] for c in data["cells"]] == [None, None, 0.5, pytest.approx(5e-4)]


def test_lift_rejects_unknown_profiles_and_targets(capsys):
    assert main(["lift", "--profiles", "pct9"]) == 2
    assert "unknown profile(s) pct9" in capsys.readouterr().err
    assert main(["lift", "--targets", "F9"]) == 2
    assert "unknown target(s) F9" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Replay: the same priorities and the same changes, at the same threads and hits.

WORKLOAD = textwrap.dedent("""
    import threading
    import harness.runtime.failpoints as faults

    def body():
        for i in range(150):
            faults.fault_point("drafter.before_step")
            sum(range(300))  # a little work between two points

    ts = [threading.Thread(target=body, name=f"w-{i}") for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
""")


def _pct_decisions(path: Path) -> list[tuple]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("action") in ("pct-priority", "pct-change"):
            out.append((rec["action"], rec["thread"], rec["point"], rec["when"], rec["hit"], rec["value"]))
    return sorted(out)


def test_harness_replay_repeats_a_pct_trials_priorities_and_changes(tmp_path, capsys):
    plan = Plan(seed=SEED, profile="pct3", pct=Pct(depth=3, steps=300, threads="w-*", wait_s=0.05))
    spec = TrialSpec(
        trial_id="pct-000",
        cell="pct",
        plan=plan.validate().to_dict(),
        timeout_s=60,
        workload=WorkloadSpec(kind="command", argv=(sys.executable, "-c", WORKLOAD)),
    )
    store = Store(tmp_path / "store")
    original = run_trial(spec, store.artefacts_dir(spec.trial_id))
    store.append(original)
    assert original.outcome is Outcome.OK, original.detail
    want = _pct_decisions(Path(original.artefacts) / "plan_log.jsonl")
    changes = [d for d in want if d[0] == "pct-change"]
    assert len([d for d in want if d[0] == "pct-priority"]) == 2 and len(changes) == 2

    assert main(["replay", "pct-000", "--store", str(tmp_path / "store"), "-n", "2"]) == 0
    capsys.readouterr()
    replays = Store(tmp_path / "store" / "replays")
    for record in replays.load():
        art = Path(record.artefacts)
        pinned = json.loads((art / "plan.json").read_text())["pct"]["pinned"]
        assert sorted(map(tuple, pinned)) == sorted(d[1:] for d in changes)
        assert _pct_decisions(art / "plan_log.jsonl") == want
