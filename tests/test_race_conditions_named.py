"""A race is named only when its mechanism's condition is in the evidence: F14 by a recompile limit
hit only where a thread set the limit, F10 only where threads compiled at once, else the limit
reached is no race by itself; a test that fails in threads by its own state (a doctest swapping
sys.stdout, pytest.warns, a module global it writes) is not thread-safe, not a race."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.campaign.hunt import records as hunt_records
from harness.campaign.hunt.records import ONE_THREAD, RunRecord
from harness.campaign.hunt.verdicts import NOT_RACE, OWN_STATE, RACE, verdicts
from harness.diagnosis import diagnose
from harness.diagnosis.catalogue import CatalogueError, parse

ROOT = Path(__file__).resolve().parents[1]
SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"

# A thread's first calls of one fullgraph function past the recompile limit (torch 2.13's frames).
LIMIT_HIT = f"""Exception in thread Thread-1 (work):
Traceback (most recent call last):
  File "/tmp/prog.py", line 10, in work
    f(x, f"m{{n}}")
  File "{SITE}/torch/_dynamo/eval_frame.py", line 900, in compile_wrapper
    return fn(*args, **kwargs)
  File "{SITE}/torch/_dynamo/convert_frame.py", line 2628, in __call__
    result = self._inner_convert(
  File "{SITE}/torch/_dynamo/convert_frame.py", line 777, in __call__
    result = _compile(
  File "{SITE}/torch/_dynamo/convert_frame.py", line 2031, in _compile
    raise FailOnRecompileLimitHit(
torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to fullgraph=True
"""
SET_64 = "MainThread: torch._dynamo.config.recompile_limit=64"

# pytest-run-parallel's native traceback of a doctest run in 4 threads (junit's failure text).
DOCTEST = f"""doctest.DocTestFailure: <DocTest mod._lines from /tmp/mod.py:13 (2 examples)>
Traceback (most recent call last):
  File "{SITE}/pytest_run_parallel/plugin.py", line 83, in closure
    fn(*args, **kwargs)
  File "/tmp/mod.py", line 25, in test_doctests_examples
    doctest.testmod(sys.modules[__name__], raise_on_error=True)
  File "{STDLIB}/doctest.py", line 1990, in testmod
    runner.run(test)
  File "{STDLIB}/doctest.py", line 1878, in run
    r = DocTestRunner.run(self, test, compileflags, out, False)
  File "{STDLIB}/doctest.py", line 1517, in run
    return self.__run(test, compileflags, out)
  File "{STDLIB}/doctest.py", line 1418, in __run
    self.report_failure(out, test, example, got)
  File "{STDLIB}/doctest.py", line 1887, in report_failure
    raise DocTestFailure(test, example, got)
doctest.DocTestFailure: <DocTest mod._lines from /tmp/mod.py:13 (2 examples)>
"""


def _one(text: str, **kw) -> diagnose.Finding:
    failures = diagnose.failures_in_text(text, source="log")
    assert failures, text
    failures = [diagnose.Failure(**{**_fields(f), **kw}) for f in failures]
    (finding,) = diagnose.diagnose(failures)
    return finding


def _fields(f: diagnose.Failure) -> dict:
    return {name: getattr(f, name) for name in f.__dataclass_fields__}


# ------------------------------------------------------------------ a recompile limit reached


def test_a_recompile_limit_hit_names_no_race_where_no_thread_set_the_limit():
    finding = _one(LIMIT_HIT)
    assert finding.race == "recompile-limit", finding.verdict()
    assert finding.verdict() == "recompile limit reached (not a race by itself)"
    assert "F14" not in [m.race for m in finding.matches]
    # Its own advice, for torch 2.13: raise the limit, mark dynamic, warm up in one thread.
    assert "torch._dynamo.config.recompile_limit" in finding.change and "mark_dynamic" in finding.change
    assert "set it in each thread" not in finding.change


def test_a_thread_that_set_the_limit_makes_it_f14():
    finding = _one(LIMIT_HIT, config_threads=SET_64)
    assert finding.race == "F14" and finding.verdict().startswith("known: F14"), finding.verdict()
    assert any("config set in threads: MainThread" in e for e in finding.matches[0].evidence), finding.matches[0]
    # Set to the default, the program raised nothing: the limit reached again.
    assert _one(LIMIT_HIT, config_threads=SET_64.replace("=64", "=8")).race == "recompile-limit"


def test_threads_compiling_at_once_make_it_f10_and_a_set_limit_still_f14():
    assert _one(LIMIT_HIT, exposures={"F10": 3}).race == "F10"
    assert _one(LIMIT_HIT, exposures={"F10": 0}).race == "recompile-limit"
    unexpected = (
        LIMIT_HIT + "W0101 guards.py] Unexpected recompilation: runtime guards failed even though they passed\n"
    )
    assert _one(unexpected).race == "F10"
    # A thread that set the limit says more than a window that opens in most threaded runs.
    assert _one(LIMIT_HIT, exposures={"F10": 3}, config_threads=SET_64).race == "F14"


def test_an_ok_run_hitting_the_limit_with_threads_compiling_at_once_shows_f10():
    limit_8 = "W1202 torch/_dynamo/convert_frame.py:1994] torch._dynamo hit config.recompile_limit (8)\n"
    ok = diagnose.Failure(source="ok", outcome="OK", key=None, summary=None, text=limit_8, detail="exit 0")
    (note,) = diagnose.diagnose([ok])
    assert note.race is None and note.verdict() == "note: recompile limit hit (not a race by itself)"
    ok.exposures = {"F10": 2}
    (f10,) = diagnose.diagnose([ok])
    assert f10.race == "F10", f10.verdict()


def test_needs_context_is_the_catalogues_not_f14s():
    """Any race may say its message needs its precondition; one that says so without a context to
    show it is refused at load."""
    entry = """
[[race]]
id = "X1"
title = "a race whose message others print too"
kind = "race"
needs_cuda = false
summary = ['x1-own-summary']
messages = ['shared message']
needs_context = "other code prints the shared message"
context = ['a precondition']
"""
    catalogue = parse(entry)
    plain = diagnose.Failure(source="s", outcome="CRASH", key="k", summary="Boom in x", text="shared message\n")
    assert diagnose.diagnose([plain], catalogue=catalogue)[0].race is None
    plain.text += "a precondition\n"
    assert diagnose.diagnose([plain], catalogue=catalogue)[0].race == "X1"
    with pytest.raises(CatalogueError, match="needs_context without a context"):
        parse(entry.replace("context = ['a precondition']\n", ""))


# ------------------------------------------------------------------------ a test's own state


def test_a_doctest_failing_in_threads_is_the_tests_own_state():
    finding = _one(DOCTEST)
    assert finding.race == "own-stdout", finding.verdict()
    assert finding.verdict().startswith("not thread-safe: the test's own state (sys.stdout"), finding.verdict()
    assert "race" not in finding.verdict().split("), ")[0]


TESTS_WITH_OWN_STATE = """
import contextlib
import io
import warnings

COUNT = 0


def test_counts():
    global COUNT
    COUNT = 0
    for _ in range(1000):
        COUNT += 1
    assert COUNT == 1000


def test_prints():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print(1)
    assert buf.getvalue() == "1\\n"


def _caught():
    with warnings.catch_warnings(record=True) as w:
        warnings.warn("y")
    assert len(w) == 1, w


def test_warns_through_a_helper():
    _caught()


def test_plain():
    assert 1 + 1 == 3
"""


def _failing_in(path: Path, *frames: tuple[int, str], message: str) -> str:
    """pytest-run-parallel's native traceback through the test's own frames in `path`."""
    lines = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/pytest_run_parallel/plugin.py", line 83, in closure',
    ]
    lines += ["    fn(*args, **kwargs)"]
    lines += [f'  File "{path}", line {line}, in {name}\n    pass' for line, name in frames]
    return "\n".join([*lines, message, ""])


@pytest.mark.parametrize(
    "frames, message, own",
    [
        (((14, "test_counts"),), "AssertionError: assert 3970 == 1000", "own-global"),
        (((21, "test_prints"),), "AssertionError: assert '' == '1\\n'", "own-stdout"),
        (((31, "test_warns_through_a_helper"), (27, "_caught")), "AssertionError: []", "own-warnings"),
        (((35, "test_plain"),), "AssertionError: assert 2 == 3", None),
    ],
)
def test_a_tests_own_state_is_read_from_its_code(tmp_path, frames, message, own):
    path = tmp_path / "test_own.py"
    path.write_text(TESTS_WITH_OWN_STATE, encoding="utf-8")
    finding = _one(_failing_in(path, *frames, message=message))
    assert finding.race == own, finding.verdict()
    if own:
        assert finding.verdict().startswith("not thread-safe: the test's own state"), finding.verdict()
    else:
        assert finding.verdict().startswith("unknown"), finding.verdict()


def test_a_race_message_wins_over_the_tests_own_state(tmp_path):
    path = tmp_path / "test_own.py"
    path.write_text(TESTS_WITH_OWN_STATE, encoding="utf-8")
    f2 = "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function."
    finding = _one(_failing_in(path, (14, "test_counts"), message=f2))
    assert finding.race == "F2", finding.verdict()


# -------------------------------------------------------------------------- hunt's verdicts


def _records(races: tuple[str, ...], one_thread: str | None = "passed") -> list[RunRecord]:
    tid = "t.py::test_x"
    failing = hunt_records.TestRecord(id=tid, outcome="failed", threads=4, message="boom", races=races)
    runs = [
        RunRecord(
            run=i, arm=0, seed=i, outcome="OK", rc=1, detail="", duration_s=1.0, folder=f"run-{i}", tests=(failing,)
        )
        for i in range(2)
    ]
    if one_thread is not None:
        rerun = hunt_records.TestRecord(id=tid, outcome=one_thread, threads=1)
        runs.append(
            RunRecord(
                run=ONE_THREAD,
                arm=0,
                seed=0,
                outcome="OK",
                rc=0,
                detail="",
                duration_s=1.0,
                folder="rerun",
                tests=(rerun,),
            )
        )
    return runs


def test_hunt_calls_a_test_failing_by_its_own_state_not_thread_safe():
    (v,) = verdicts(_records(("own-stdout",)), [None])
    assert (v.verdict, v.races) == (OWN_STATE, ()), v
    assert v.why.startswith("not thread-safe: the test's own state (sys.stdout"), v.why
    # A race named beside it is the race; failing with 1 thread too is no race either way.
    assert verdicts(_records(("own-stdout", "R4")), [None])[0].verdict == RACE
    assert verdicts(_records(("own-stdout",), "failed"), [None])[0].verdict == NOT_RACE


def test_hunt_calls_a_recompile_limit_reached_no_race_by_itself():
    (v,) = verdicts(_records(("recompile-limit",)), [None])
    assert (v.verdict, v.races) == (NOT_RACE, ()), v
    assert v.why == "recompile limit reached (not a race by itself); it fails only with threads", v.why
    assert verdicts(_records(("F14",)), [None])[0].verdict == RACE


THREAD_UNSAFE_TESTS = '''
import doctest
import sys
import time

COUNT = 0


def _lines(n):
    """
    >>> _lines(3)
    [0, 1, 2]
    >>> time.sleep(0.002); print("a" * 40)
    aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
    """
    return list(range(n))


def test_doctest_in_threads():
    for _ in range(50):
        doctest.testmod(sys.modules[__name__], raise_on_error=True)


def test_module_global():
    global COUNT
    COUNT = 0
    for _ in range(2000):
        COUNT += 1
        time.sleep(0)
    assert COUNT == 2000
'''


@pytest.mark.slow
def test_a_hunt_reads_thread_unsafe_tests_as_their_own_state(tmp_path):
    """End to end, no torch in the tests: a doctest and a global written from 4 threads (about 10 s).
    The doctest's example sleeps with its captured stdout installed, so that another thread's swap
    lands inside it in every run: one run without the sleep passed it in 1 of 4 clean-clone CI runs."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_unsafe.py").write_text(THREAD_UNSAFE_TESTS, encoding="utf-8")
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "hunt", "--json", "--runs", "1", "-o", str(tmp_path / "h"), "--", str(suite)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    tests = {t["id"].rsplit("::", 1)[-1]: t for t in report["tests"]}
    for name, own in (("test_doctest_in_threads", "sys.stdout"), ("test_module_global", "module globals")):
        t = tests[name]
        assert t["verdict"] == OWN_STATE and own in t["why"] and t["races"] == [], t
    assert proc.returncode == 0 and report["exit"] == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------ a native crash beside reset()

GC_SEGV = """Fatal Python error: Segmentation fault

Current thread 0x00007f2d1537c6c0 (most recent call first):
  Garbage-collecting
  File "/tmp/prog.py", line 57 in work

Thread 0x00007f2d3bc48240 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 1112 in join
"""
IN_RESET = GC_SEGV + '  File "/venv/lib/python3.11/site-packages/torch/_dynamo/__init__.py", line 153 in reset\n'
RESET_BESIDE = "partner: torch._dynamo.reset() beside 3 threads"


@pytest.mark.parametrize(
    "text, kw",
    [
        (GC_SEGV, {"config_threads": RESET_BESIDE}),
        (GC_SEGV, {"config_threads": f"worker-0 (pid 41): {RESET_BESIDE.split(': ', 1)[1]}"}),
        (GC_SEGV, {"exposures": {"R5": 2}}),
        (IN_RESET, {}),
    ],
    ids=["reset-recorded", "reset-in-a-child", "window-opened", "a-thread-inside-reset"],
)
def test_a_native_crash_beside_a_reset_is_suspected_r5(text, kw):
    """Heap reset() corrupted, met later (a GC traversal): no frame of the crash is R5's, the run's
    record of reset() beside live threads is."""
    finding = _one(text, outcome="ABORT", torch="2.13.0+cpu", **kw)
    assert finding.race == "R5" and finding.verdict().startswith("suspected: R5"), finding.verdict()


def test_a_native_crash_with_no_reset_beside_threads_names_no_race():
    assert _one(GC_SEGV, outcome="ABORT", torch="2.13.0+cpu").race is None
    alone = "MainThread: torch._dynamo.reset() beside 0 threads"
    assert _one(GC_SEGV, outcome="ABORT", torch="2.13.0+cpu", config_threads=alone).race is None
    assert _one(GC_SEGV, outcome="ABORT", torch="2.13.0+cpu", exposures={"R5": 0}).race is None
