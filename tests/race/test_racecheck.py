"""The suite's own rules, without running a repro: trial counts from recorded rates, the loud
failure when a race stops reproducing, and the weaker-bound message below 29 fix trials."""

from __future__ import annotations

import dataclasses

import pytest

from harness.trial.outcome import Outcome, TrialResult
from tests.race import catalogue, racecheck
from tests.race.catalogue import CPU

pytestmark = pytest.mark.race


def fake_trials(monkeypatch, outcome: Outcome, signature: str | None = None, *, window: str = "as stated") -> list[int]:
    """`window`: "as stated" (the fix trials meet the window as the row says, raw trials open it),
    "open" / "shut" (every trial), or "off" (exposure not measured)."""
    calls: list[int] = []

    def trial(race, index, artefacts, *, fixed):
        calls.append(index)
        opened = {"open": True, "shut": False}.get(window, not fixed or race.fix_window == "opens")
        exposures = None if window == "off" else {w: 3 if opened else 0 for w in race.windows}
        return TrialResult(
            trial_id=f"t/{index}",
            cell="c",
            trial_index=index,
            outcome=outcome,
            signature=signature,
            signature_summary=signature,
            artefacts=str(artefacts),
            exposures=exposures,
        )

    monkeypatch.setattr(racecheck, "trial", trial)
    return calls


def test_race_repro_trials_keep_a_consistent_rate_unseen_within_the_checks_share():
    assert racecheck.MISS_PROBABILITY == racecheck.SUITE_FALSE_ALARM / racecheck.REPRO_CHECKS
    race = dataclasses.replace(CPU["r06"], recorded=(10, 10))
    n, miss = racecheck.repro_trials(race)
    assert miss <= racecheck.MISS_PROBABILITY < 0.278 ** (n - 1)  # Wilson low 0.722: the smallest such n
    n, miss = racecheck.repro_trials(dataclasses.replace(race, recorded=(1, 10)))
    assert n == racecheck.REPRO_MAX_TRIALS and miss > racecheck.MISS_PROBABILITY  # capped: printed


def test_race_suite_false_alarms_stay_within_the_budget():
    # Every reproduction check of the catalogue at its own trial count: the chance that a race
    # still at its recorded rate goes unseen somewhere in one run adds up to at most 0.1%.
    rows = [
        r
        for r in (*catalogue.CPU.values(), *catalogue.GPU.values(), *catalogue.ON_TORCH.values())
        if r.expect == "reproduces"
    ]
    assert len(rows) == racecheck.REPRO_CHECKS
    misses = {
        r.id + ("@" + r.torch if r in catalogue.ON_TORCH.values() else ""): racecheck.repro_trials(r)[1] for r in rows
    }
    assert sum(misses.values()) <= racecheck.SUITE_FALSE_ALARM, sorted(misses.items(), key=lambda kv: -kv[1])


def test_race_check_fails_loudly_when_a_race_stops_reproducing(monkeypatch, tmp_path):
    race = dataclasses.replace(CPU["r06"], recorded=(10, 10))
    calls = fake_trials(monkeypatch, Outcome.OK)
    with pytest.raises(pytest.fail.Exception, match=r"no longer reproduces on torch \S+: update the catalogue"):
        racecheck.check_reproduces(race, tmp_path)
    assert calls == list(range(racecheck.repro_trials(race)[0])) and len(calls) == 8  # 0.278**8 < 5.6e-5


def test_race_other_failures_do_not_count_as_reproductions(monkeypatch, tmp_path):
    race = dataclasses.replace(CPU["r06"], recorded=(10, 10))
    fake_trials(monkeypatch, Outcome.CRASH, "fx-current-patcher-0000000000")
    with pytest.raises(pytest.fail.Exception, match="other failures"):
        racecheck.check_reproduces(race, tmp_path)


def test_race_fix_check_states_a_weaker_bound_below_29(monkeypatch, tmp_path):
    monkeypatch.delenv(racecheck.FIX_TRIALS_ENV, raising=False)
    race = dataclasses.replace(CPU["r07"], fix_trials=5)
    fake_trials(monkeypatch, Outcome.OK)
    with pytest.warns(racecheck.RaceBound, match=r"0/5 failures.*45\.1%.*N=5 < 29: weaker"):
        racecheck.check_fix_holds(race, tmp_path)


def test_race_fix_trials_are_split_into_xdist_sized_items(monkeypatch, tmp_path):
    monkeypatch.setenv(racecheck.FIX_TRIALS_ENV, "12")
    chunks = racecheck.fix_chunks(CPU["r07"])
    assert chunks == [(0, 5), (5, 10), (10, 12)]
    calls = fake_trials(monkeypatch, Outcome.OK)
    with pytest.warns(racecheck.RaceBound, match=r"N=12 stressed trials.* in 3 test items; 0/12"):
        racecheck.check_fix_holds(CPU["r07"], tmp_path, chunks[0])
    racecheck.check_fix_holds(CPU["r07"], tmp_path, chunks[2])  # later chunks: no bound line
    # r07's global-lock keeps its window shut: the first chunk adds raw trials 0 and 1, the control.
    assert calls == [0, 1, 2, 3, 4, 0, 1, 10, 11]


def test_race_fix_check_reports_29_trials_without_a_weaker_bound(monkeypatch, tmp_path):
    monkeypatch.setenv(racecheck.FIX_TRIALS_ENV, "29")
    fake_trials(monkeypatch, Outcome.OK)
    with pytest.warns(
        racecheck.RaceBound, match=r"0/29 failures give a 95% upper bound on the failure rate of 9\.8%"
    ) as seen:
        racecheck.check_fix_holds(CPU["r07"], tmp_path)
    assert "weaker" not in str(seen[0].message)


def test_race_fix_check_fails_on_any_failure(monkeypatch, tmp_path):
    fake_trials(monkeypatch, Outcome.ABORT, "Segmentation-fault-0000000000")
    with pytest.raises(AssertionError, match=r"fix global-lock failed \d+/\d+ stressed trials"):
        racecheck.check_fix_holds(CPU["r16"], tmp_path)


@pytest.fixture
def r16_abort(monkeypatch, tmp_path) -> tuple[racecheck.Race, TrialResult]:
    """r16's row and an ABORT trial whose artefacts are tmp_path, on a host with the symbol tools."""
    import shutil

    race = CPU["r16"]
    assert race.native.startswith("create_cache_entry|ExtraState::invalidate")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    return race, TrialResult(trial_id="t/0", cell="c", trial_index=0, outcome=Outcome.ABORT, artefacts=str(tmp_path))


def test_race_native_crash_site_is_checked_when_the_runner_kept_it(r16_abort, tmp_path, capsys):
    from harness.trial.folder import NATIVE_STACK

    race, result = r16_abort
    racecheck.check_native_site(race, result)  # nothing kept: said, not failed
    assert "native crash site not checked" in capsys.readouterr().out
    (tmp_path / NATIVE_STACK).write_text("# h: 1 frame\nlibtorch_python.so(+0x2) lookup\n")
    with pytest.raises(pytest.fail.Exception, match=r"native crash site moved .*lookup.*update the catalogue"):
        racecheck.check_native_site(race, result)


@pytest.mark.parametrize(
    "stack",
    [
        "# h: 2 frames\nlibtorch_python.so(+0x1) create_cache_entry\n",
        # The same reset meeting a guard's invalidation (seen once in CI, 2026-12-01): the same race.
        "# h: 1 frame\nlibtorch_python.so(+0x8970db) ExtraState::invalidate(CacheEntry*, pybind11::object)\n",
        # pybind11's binding of it, named by its member-pointer type (seen under load, 2026-12-02).
        "# h: 1 frame\nlibtorch_python.so(+0x9) void pybind11::cpp_function::"
        "initialize<void (ExtraState::*)(CacheEntry*, pybind11::object)>\n",
    ],
    ids=["create_cache_entry", "invalidate", "pybind11-binding-of-invalidate"],
)
def test_race_native_crash_site_as_recorded(r16_abort, tmp_path, capsys, stack):
    from harness.trial.folder import NATIVE_STACK

    race, result = r16_abort
    (tmp_path / NATIVE_STACK).write_text(stack)
    racecheck.check_native_site(race, result)
    assert "as recorded" in capsys.readouterr().out


# ------------------------------------------------------------------------------ exposure gate


def test_race_fix_check_fails_when_exposure_was_not_measured(monkeypatch, tmp_path):
    monkeypatch.setenv(racecheck.FIX_TRIALS_ENV, "5")
    fake_trials(monkeypatch, Outcome.OK, window="off")
    for row in ("r06", "r16"):  # a fix that meets the window, one that keeps it shut
        with pytest.raises(pytest.fail.Exception, match=r"exposure not measured in fix trials \[0, 1, 2, 3, 4\]"):
            racecheck.check_fix_holds(CPU[row], tmp_path)


def test_race_fix_that_meets_the_window_must_meet_it_in_the_stated_trials(monkeypatch, tmp_path):
    monkeypatch.setenv(racecheck.FIX_TRIALS_ENV, "29")
    race = CPU["r06"]
    assert (race.windows, race.fix_window, race.fix_exposed) == (("F2",), "opens", 25)
    fake_trials(monkeypatch, Outcome.OK, window="shut")
    with pytest.raises(pytest.fail.Exception, match=r"opened in 0 of 29 trials .*needs at least 25 .*no evidence"):
        racecheck.check_fix_holds(race, tmp_path)
    fake_trials(monkeypatch, Outcome.OK, window="open")
    with pytest.warns(racecheck.RaceBound, match=r"0/29 failures .*window F2 opened in 29 of 29 trials \(87 times\)"):
        racecheck.check_fix_holds(race, tmp_path)
    assert racecheck.required_exposed(race, 5, 29) == 4  # a chunk of 5: 25/29 of it


def test_race_fix_that_keeps_the_window_shut_needs_the_control_to_open_it(monkeypatch, tmp_path):
    race = dataclasses.replace(CPU["r16"], fix_trials=5)
    monkeypatch.delenv(racecheck.FIX_TRIALS_ENV, raising=False)
    fake_trials(monkeypatch, Outcome.OK, window="shut")  # the plan never opens it, raw either
    with pytest.raises(pytest.fail.Exception, match=r"control without the fix .*opened in 0 of 2 .*not shown"):
        racecheck.check_fix_holds(race, tmp_path)
    fake_trials(monkeypatch, Outcome.OK, window="open")  # the fix met it after all
    with pytest.raises(pytest.fail.Exception, match=r"recorded as keeping window R5 shut.*fix_window = \"opens\""):
        racecheck.check_fix_holds(race, tmp_path)
    calls = fake_trials(monkeypatch, Outcome.OK)
    with pytest.warns(racecheck.RaceBound, match=r"keeps it shut; without it the same seeds opened it in 2 of 2"):
        racecheck.check_fix_holds(race, tmp_path)
    assert calls == [0, 1, 2, 3, 4, 0, 1]


def test_race_reproduction_reports_the_window_beside_the_failures(monkeypatch, tmp_path, capsys):
    race = dataclasses.replace(CPU["r06"], recorded=(10, 10))
    fake_trials(monkeypatch, Outcome.CRASH, "fx-trace-of-dynamo-fn-0000000000")
    racecheck.check_reproduces(race, tmp_path)
    assert "failed 1 of 1 trials run, window F2 opened in 1 of 1 trial (3 times)" in capsys.readouterr().out
    fake_trials(monkeypatch, Outcome.OK, window="off")
    with pytest.raises(pytest.fail.Exception, match=r"exposure not measured in \d+ trials"):
        racecheck.check_reproduces(race, tmp_path)
