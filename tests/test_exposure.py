"""Exposure probes: the region tracker, each probe's rule, the file a trial writes, the runner's
record of it, the tables and verdicts that read it, and real repro trials on this torch."""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path

import pytest

from harness.analysis import verdicts
from harness.analysis.cell_tables import NOT_MEASURED, exposure_lines, exposure_text, markdown_table, text_table
from harness.analysis.summary import summarize
from harness.diagnosis.catalogue import CatalogueError, load, parse
from harness.faults import exposure, points
from harness.faults.exposure import FIRST_STEP, PROBES, Exposure
from harness.faults.points import TORCH_POINTS, Point
from harness.faults.profiles import plan_from_seed
from harness.faults.regions import Regions
from harness.trial.cells import strategy_name
from harness.trial.folder import EXPOSURE
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec


def elsewhere(*calls) -> None:
    """Run hook calls in another thread, which ends still inside whatever region they entered."""
    t = threading.Thread(target=lambda: [fn(*args) for fn, *args in calls])
    t.start()
    t.join()


# ------------------------------------------------------------------------------------- regions


def test_regions_tell_other_threads_apart_and_nest():
    r = Regions()
    me = threading.get_ident()
    r.enter("fx.trace", me)
    r.enter("fx.trace", me)
    assert r.inside("fx.trace", me) and not r.others_inside("fx.trace", me)
    assert r.others_inside("fx.trace", me + 1)
    r.leave("fx.trace", me)
    assert r.inside("fx.trace", me)
    r.leave("fx.trace", me)
    r.leave("fx.trace", me)  # a leave without an enter is ignored
    assert not r.inside("fx.trace", me) and not r.others_inside("fx.trace", me + 1)


# --------------------------------------------------------------------------------------- rules


def test_f2_opens_when_a_compiled_call_meets_another_threads_trace():
    x = Exposure(None)
    x.hook("fx.trace", "before")
    x.hook("compiled.call", "before")  # its own trace: no window
    x.hook("fx.trace", "after")
    assert x.counts == {}
    elsewhere((x.hook, "fx.trace", "before"))
    x.hook("compiled.call", "before")
    x.hook("compiled.call", "before")
    assert x.counts == {"F2": 2} and x.eager == {} and x.first_s["F2"] >= 0


def test_f2_openings_that_run_eagerly_are_counted_apart(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch._dynamo.config", types.SimpleNamespace(error_on_nested_fx_trace=False))
    x = Exposure(None)
    elsewhere((x.hook, "fx.trace", "before"))
    x.hook("compiled.call", "before")
    assert x.counts == {"F2": 1} and x.eager == {"F2": 1}


def test_two_traces_at_once_open_f2_and_f3():
    x = Exposure(None)
    elsewhere((x.hook, "fx.trace", "before"))
    x.hook("fx.trace", "before")
    assert x.counts == {"F2": 1, "F3": 1}


def test_r4_opens_for_a_module_call_from_a_thread_that_is_not_tracing():
    x = Exposure(None)
    x.hook("fx.trace", "before")
    x.hook("fx.call_module", "before")  # the tracer's own module calls
    assert x.counts == {}
    elsewhere((x.hook, "fx.call_module", "before"))
    assert x.counts == {"R4": 1}


def test_r5_opens_both_ways_round_a_reset():
    x = Exposure(None)
    elsewhere((x.hook, "dynamo.reset", "before"))
    x.hook("compiled.call", "before")
    x.hook("dynamo.convert_frame", "before")
    assert x.counts == {"R5": 2}
    y = Exposure(None)
    elsewhere((y.hook, "dynamo.convert_frame", "before"))
    y.hook("dynamo.reset", "before")
    assert y.counts == {"R5": 1}


def test_f10_g2_and_the_cuda_windows():
    x = Exposure(None)
    elsewhere((x.hook, "dynamo.convert_frame", "before"), (x.hook, "cudagraph.record", "before"))
    x.hook("dynamo.convert_frame", "before")  # a second conversion at once: F10
    x.hook("aot.backward_compile", "before")  # a backward's compile beside it: G2
    x.hook("cudagraph.record", "before")  # a second recording: F1c
    x.hook("compiled.call", "before")  # a call during another's recording: capture
    assert x.counts == {"F10": 1, "G2": 1, "F1c": 1, "capture": 1}


def test_a_region_left_after_or_on_a_raise_is_closed():
    x = Exposure(None)
    for when in ("after", "raise"):
        elsewhere((x.hook, "fx.trace", "before"), (x.hook, "fx.trace", when))
        x.hook("compiled.call", "before")
    assert x.counts == {}


def test_the_trainers_first_step_window_is_two_first_steps_at_once():
    x = Exposure(None)
    elsewhere(
        (x.stage, "drafter.before_forward"), (x.stage, "drafter.after_backward"), (x.stage, "drafter.before_forward")
    )  # its second step: not a first step
    x.stage("drafter.before_forward")  # the other's first step had ended
    assert x.counts == {}
    y = Exposure(None)
    elsewhere((y.stage, "drafter.before_forward"))
    y.stage("drafter.before_forward")
    assert y.counts == {FIRST_STEP: 1}


# ---------------------------------------------------------------------------- points and hooks


@pytest.fixture
def fake_point(monkeypatch):
    mod = types.ModuleType("fake_exposure_mod")

    def work(fail=False):
        if fail:
            raise ValueError("work failed")
        return 1

    mod.work = work
    monkeypatch.setitem(sys.modules, "fake_exposure_mod", mod)
    monkeypatch.setitem(
        TORCH_POINTS, "fake.work", Point(name="fake.work", targets=("fake_exposure_mod:work",), why="t")
    )
    monkeypatch.setattr(points, "PRELOAD", ())
    points.uninstall_all()
    yield mod
    points.uninstall_all()


def test_a_point_takes_several_hooks_nested_and_a_raise_reaches_them(fake_point):
    seen = []
    points.install_now(["fake.work"], lambda p, w: seen.append(("plan", w)))
    points.install_now(["fake.work"], lambda p, w: seen.append(("probe", w)))
    assert fake_point.work() == 1
    assert seen == [("plan", "before"), ("probe", "before"), ("probe", "after"), ("plan", "after")]
    seen.clear()
    with pytest.raises(ValueError):
        fake_point.work(fail=True)
    assert seen == [("plan", "before"), ("probe", "before"), ("probe", "raise"), ("plan", "raise")]


def test_stage_handlers_are_composed_for_dflash_faults():
    from harness.runtime import failpoints as faults

    seen = []
    points.uninstall_all()
    try:
        points.add_stage_handler(lambda name: seen.append(("plan", name)))
        points.add_stage_handler(lambda name: seen.append(("probe", name)))
        faults.fault_point("drafter.before_forward")
    finally:
        points.uninstall_all()
        faults.set_handler(None)
    assert seen == [("plan", "drafter.before_forward"), ("probe", "drafter.before_forward")]


# ---------------------------------------------------------------------------- the trial's file


def test_the_file_is_written_at_first_opening_and_doublings_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(points, "installed", lambda: {name: "t" for name in ("fx.trace", "compiled.call")})
    monkeypatch.delitem(sys.modules, "dflash.step", raising=False)  # another test of this worker may have loaded it
    path = tmp_path / EXPOSURE
    x = Exposure(str(path))
    elsewhere((x.hook, "fx.trace", "before"))
    writes = []
    monkeypatch.setattr(x, "write", lambda final: writes.append(final) or Exposure.write(x, final=final))
    for _ in range(5):
        x.hook("compiled.call", "before")
    assert writes == [False, False, False]  # the 1st, 2nd and 4th opening
    reading = exposure.read(path)
    assert reading.counts == {"F2": 4, "F3": 0} and not reading.final
    x.write(final=True)
    reading = exposure.read(path)
    assert reading.counts == {"F2": 5, "F3": 0} and reading.final and set(reading.first_s) == {"F2"}
    assert exposure.read(tmp_path / "missing.json") is None


def test_a_probe_is_measured_only_once_its_points_are_installed(monkeypatch):
    monkeypatch.setattr(points, "installed", lambda: {"fx.trace": "t"})
    monkeypatch.delitem(sys.modules, "dflash.step", raising=False)  # the trainer's window needs its stages
    assert Exposure(None).measured() == ["F3"]  # F2 needs compiled.call too; CUDA ones need CUDA


# --------------------------------------------------------------------------- records and tables


def _record(cell: str, i: int, outcome=Outcome.OK, **exposure_fields) -> TrialResult:
    return TrialResult(
        trial_id=f"m/{cell}/{i}",
        cell=cell,
        trial_index=i,
        outcome=outcome,
        signature="s" if outcome.is_failure else None,
        signature_summary="fx-trace-of-dynamo-fn" if outcome.is_failure else None,
        **exposure_fields,
    )


def _cells():
    rs = [
        _record("r06:raw@fx-widen", i, Outcome.CRASH, exposures={"F2": 400, "F3": 0}, exposure_first_s={"F2": 7.0})
        for i in range(3)
    ]
    rs += [
        _record(
            "r06:nested-fx-fallback@fx-widen",
            i,
            exposures={"F2": 380},
            exposure_eager={"F2": 380},
            exposure_first_s={"F2": 6.0},
        )
        for i in range(3)
    ]
    rs += [_record("r06:global-lock@fx-widen", i, exposures={"F2": 0, "F3": 0}) for i in range(3)]
    rs += [_record("r06:other-fix@fx-widen", i, exposures={"F2": 1840 if i else 0}) for i in range(3)]
    rs += [_record("r06:old@fx-widen", i) for i in range(3)]  # stored before the probes
    return {c.strategy: c for c in summarize(rs)}


def test_stored_records_without_exposure_load_as_not_measured():
    old = {"trial_id": "m/c/0", "cell": "r06:raw@-", "trial_index": 0, "outcome": "ok"}
    r = TrialResult.from_json(old)
    assert r.exposures is None and r.exposed() is None
    assert TrialResult.from_json(json.loads(json.dumps(_record("c", 0, exposures={"F2": 3}).to_json()))).exposed()


def test_a_cell_reads_clean_only_where_its_window_opened():
    cells = _cells()
    assert exposure_text(cells["other-fix"]) == "clean, window opened in 2 of 3 trials (3,680 times)"
    assert exposure_text(cells["global-lock"]) == "window never opened in 3 trials"
    assert exposure_text(cells["nested-fx-fallback"]).startswith(
        "window never opened on the compiled path (opened only as eager calls, in 3 of 3 trials, 1,140 times)"
    )
    assert exposure_text(cells["raw"]) == "window opened in 3 of 3 trials (1,200 times)"
    assert exposure_text(cells["old"]) == NOT_MEASURED
    table = text_table(list(cells.values()))
    assert table.splitlines()[0].split()[:3] == ["cell", "k/n", "window"]
    wide = text_table(list(cells.values()), width=300)  # no entry wrapped
    assert "exposure not measured" in wide and "exposure not measured" in markdown_table(list(cells.values()))
    lines = exposure_lines(list(cells.values()))
    assert "r06:raw@fx-widen: F2 3/3 (1,200 times); first opening at 7.0s (median)" in lines


def test_a_store_from_before_the_probes_keeps_its_table():
    rs = [_record("r06:raw@-", i) for i in range(2)]
    assert "window" not in text_table(summarize(rs)).splitlines()[0]


def test_recommend_does_not_count_stressed_trials_whose_window_never_opened():
    cells = [c for c in _cells().values() if c.strategy in ("raw", "global-lock", "old")]
    for c in cells:  # 29 trials each: the lock's never met the window, old's were not measured
        c.n, c.measured, c.exposed = 29, (29 if c.strategy != "old" else 0), (29 if c.strategy == "raw" else 0)
    by = verdicts.totals(cells)["r06"]
    assert (by["global-lock"].n_stressed, by["global-lock"].n_unexposed) == (0, 29)
    assert by["old"].n_stressed == 29  # stores from before the probes: verdicts stand
    verdict = verdicts.lines(verdicts.recommend([c for c in cells if c.strategy != "old"]))[0]
    assert "`global-lock` 0/29 (0 stressed; 29 more whose window never opened, not counted)" in verdict


# ----------------------------------------------------------------------------------- catalogue


def test_the_catalogue_names_existing_probes_for_their_own_race():
    races = {r.id: r for r in load().races}
    named = {r.exposure for r in races.values() if r.exposure}
    assert named == {p.name for p in PROBES.values() if p.window != FIRST_STEP}
    for r in races.values():
        if r.exposure:
            assert PROBES[r.exposure].window == r.id
    base = '[[race]]\nid = "F2"\ntitle = "t"\nkind = "race"\nsummary = ["x"]\n'
    with pytest.raises(CatalogueError, match="unknown exposure probe"):
        parse(base + 'exposure = "no-such-probe"\n')
    with pytest.raises(CatalogueError, match="counts window 'F3', not this race"):
        parse(base + 'exposure = "fx-patcher-overlap"\n')
    assert load().windows_of("r06") == ("F2",) and load().windows_of("r13") == ()
    assert load().windows_of("dflash-tiny") is None


# --------------------------------------------------------------------------- real trials (CPU)


def _r06(tmp_path: Path, fixes: tuple[str, ...], **kwargs) -> TrialResult:
    name = strategy_name(fixes)
    spec = TrialSpec(
        trial_id=f"exposure/r06:{name}@fx-widen/0",
        cell=f"r06:{name}@fx-widen",
        workload=WorkloadSpec(kind="repro", argv=("r06_fx_tracing_flag",)),
        fixes=fixes,
        plan=plan_from_seed(0, "fx-widen").to_dict(),
        env={"OMP_NUM_THREADS": "1"},
        timeout_s=180,
        hang_s=90,
        **kwargs,
    )
    return run_trial(spec, tmp_path / name)


@pytest.mark.timeout(600)
def test_r06_counts_its_window_raw_and_the_fixes_that_shut_or_defuse_it(tmp_path):
    raw = _r06(tmp_path, ())
    assert raw.outcome is Outcome.CRASH and raw.exposures["F2"] > 0 and raw.exposure_first_s["F2"] > 0
    assert raw.exposed(["F2"])
    lock = _r06(tmp_path, ("global-lock",))  # the tracer and the call take turns
    eager = _r06(tmp_path, ("nested-fx-fallback",))  # the call runs eagerly while the other traces
    assert lock.outcome is Outcome.OK and lock.exposures["F2"] == 0
    assert eager.outcome is Outcome.OK and eager.exposures["F2"] == eager.exposure_eager["F2"] > 0
    cells = {c.strategy: c for c in summarize([raw, lock, eager])}
    assert exposure_text(cells["global-lock"]) == "window never opened in 1 trial"
    assert exposure_text(cells["nested-fx-fallback"]).startswith("window never opened on the compiled path")
    assert exposure_text(cells["raw"]).startswith("window opened in 1 of 1 trial (")


@pytest.mark.timeout(300)
def test_exposure_off_installs_nothing_and_records_not_measured(tmp_path, monkeypatch):
    off = _r06(tmp_path / "spec", ("global-lock",), exposure=False)
    assert off.exposures is None and not (Path(off.artefacts) / EXPOSURE).exists()
    assert exposure_text(summarize([off])[0]) == NOT_MEASURED
    monkeypatch.setenv(exposure.ENV_EXPOSURE, "0")  # the harness's own switch, for every trial
    spec = TrialSpec(
        trial_id="t",
        cell="t",
        workload=WorkloadSpec(
            kind="command",
            argv=(
                sys.executable,
                "-c",
                "import os, sys; print(os.environ.get('HARNESS_EXPOSURE'), 'harness' in sys.modules)",
            ),
        ),
    )
    assert (tmp_path / "cmd" / "output.txt").exists() is False
    result = run_trial(spec, tmp_path / "cmd")
    assert (tmp_path / "cmd" / "output.txt").read_text().strip() == "None False" and result.exposures is None
