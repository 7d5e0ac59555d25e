"""`python -m harness hunt` over tests/hunt_suite (a racy, a deterministic and a clean test): each
verdict, the exit codes, the JSON report's keys, and a hunt killed mid-run that resumes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from harness.campaign.hunt import options as hunt_options
from harness.campaign.hunt.records import RECORDS
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
SUITE = "tests/hunt_suite"
RACY = "hunt_racy.py::test_trace_while_others_call_eagerly"
DETERMINISTIC = "hunt_deterministic.py::test_wrong_expectation"
CLEAN = "hunt_clean.py::test_eager_modules_of_their_own"
TEST_KEYS = {
    "id", "threads", "single_reason", "failed", "runs", "arms", "races", "one_thread", "verdict", "why", "message", "holds",
    "dumps", "alone",
}  # fmt: skip
TOP_KEYS = {
    "pytest_args",
    "runs",
    "threads",
    "plan",
    "fix_sets",
    "out_dir",
    "elapsed_s",
    "tests",
    "run_failures",
    "races",
    "exit",
}

pytestmark = pytest.mark.slow


def _hunt(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "hunt", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_each_verdict_of_the_suite(tmp_path):
    proc = _hunt("--json", "-o", str(tmp_path / "hunt"), "--", SUITE)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert set(report) == TOP_KEYS
    tests = {t["id"]: t for t in report["tests"]}
    assert set(tests) == {RACY, DETERMINISTIC, CLEAN}
    assert all(set(t) == TEST_KEYS for t in tests.values())
    racy, det, clean = tests[RACY], tests[DETERMINISTIC], tests[CLEAN]
    assert racy["verdict"] == "race" and "R4" in racy["races"] and racy["threads"] == 4, racy
    assert racy["failed"] >= 1 and racy["runs"] == 3
    assert det["verdict"] == "not a race" and det["one_thread"] == "failed" and det["failed"] == 3, det
    assert "fails with 1 thread too: not a race" in det["why"]
    assert clean["verdict"] == "ok" and clean["failed"] == 0 and clean["runs"] == 3, clean
    assert "R4" in report["races"] and report["exit"] == 1 and report["run_failures"] == []
    low, high = racy["arms"][0]["wilson"]
    assert 0 < low <= racy["failed"] / 3 <= high <= 1
    # The same folder through diagnose: the same tests, the same verdicts (one way to judge it).
    again = subprocess.run(
        [sys.executable, "-m", "harness", "diagnose", "--json", str(tmp_path / "hunt")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    read = {t["id"]: (t["verdict"], t["races"], t["failed"]) for t in json.loads(again.stdout)["tests"]}
    assert read == {tid: (t["verdict"], t["races"], t["failed"]) for tid, t in tests.items()}


def test_the_clean_test_alone_exits_0_and_the_table_fits(tmp_path):
    cache = tmp_path / "pyc"
    proc = _hunt(
        "--runs", "1", "--bytecode-cache", str(cache), "-o", str(tmp_path / "hunt"), "--", SUITE, "-k", "clean"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cache.rglob("hunt_clean*.pyc"))  # the runs' bytecode went to the cache
    assert CLEAN in proc.stdout and "ok" in proc.stdout
    table = proc.stdout.split("\n\n")[0].splitlines()  # the table and its legend
    assert len(table) >= 3 and max(len(line) for line in table) <= 120
    assert re.match(r"hunt: 1 run x 4 threads a test, over \d+\.\ds: `pytest ", table[0]), table[0]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["hunt", "--"], "hunt needs pytest's arguments"),
        (["hunt", "--runs", "0", "--", SUITE], "--runs must be >= 1"),
        (["hunt", "--threads", "0", "--", SUITE], "--threads must be >= 1"),
        (["hunt", "--", SUITE, "--parallel-threads=2"], "--parallel-threads is the hunt's own"),
        (["hunt", "--plan", "no-such-profile", "--", SUITE], "no-such-profile"),
        (["hunt", "--bytecode-cache", "/dev/null/pyc", "--", SUITE], "--bytecode-cache: cannot make /dev/null/pyc"),
    ],
)
def test_bad_input_exits_2(argv, said, capsys):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_without_pytest_run_parallel_exits_2(monkeypatch, capsys):
    def missing(name):
        raise hunt_options.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(hunt_options.importlib.metadata, "version", missing)
    assert main(["hunt", "--", SUITE]) == 2
    assert "pip install 'pytest-run-parallel>=0.10'" in capsys.readouterr().err


def test_arguments_that_select_no_test_exit_2(tmp_path):
    proc = _hunt("--runs", "1", "-o", str(tmp_path / "hunt"), "--", SUITE, "-k", "no_such_test")
    assert proc.returncode == 2
    assert "error: PYTEST_ARGS select no test" in proc.stderr


def test_a_folder_of_another_hunt_exits_2(tmp_path, capsys):
    out = tmp_path / "hunt"
    out.mkdir()
    head = {"hunt": {"pytest_args": ["other"], "threads": 4, "plan": None, "fix_sets": [None]}}
    run = {
        "run": 0,
        "arm": 0,
        "seed": 0,
        "outcome": "OK",
        "rc": 0,
        "detail": "",
        "duration_s": 1.0,
        "folder": "run-0",
        "tests": [],
    }
    (out / RECORDS).write_text(json.dumps(head) + "\n" + json.dumps(run) + "\n")
    assert main(["hunt", "-o", str(out), "--", SUITE]) == 2
    assert "holds a hunt of other arguments" in capsys.readouterr().err


def _records(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return [r for r in out if "run" in r]


def test_a_hunt_killed_mid_run_resumes_without_losing_runs(tmp_path):
    out = tmp_path / "hunt"
    args = ["--runs", "3", "--workers", "1", "-o", str(out), "--", SUITE, "-k", "clean"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "hunt", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ((out / RECORDS).is_file() and _records(out / RECORDS)):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)  # the lifeline ends its run in flight
    proc.wait(timeout=30)
    first = _records(out / RECORDS)
    assert 1 <= len(first) < 3, first
    with (out / RECORDS).open("a") as f:
        f.write('{"run": 2, "arm"')  # a record a kill cut short: not a run
    resumed = _hunt("--json", *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.count("hunt: run ") == 3 - len(first)
    records = _records(out / RECORDS)
    assert sorted(r["run"] for r in records) == [0, 1, 2]
    assert records[: len(first)] == first
    (clean,) = json.loads(resumed.stdout)["tests"]
    assert clean["runs"] == 3 and clean["verdict"] == "ok"


COMPILING_TESTS = """
import torch
from unittest import mock


def test_compiles_in_its_body():
    torch.compile(torch.sin, backend="eager")(torch.ones(2))


def test_patches_on_its_own():
    with mock.patch.object(torch, "sin", torch.cos):
        pass
"""


@pytest.mark.parametrize(("detect_in_torch", "parallel"), [("", 1), ("1", 0)])
def test_a_test_that_compiles_runs_in_threads_unless_asked(tmp_path, detect_in_torch, parallel):
    """pytest-run-parallel alone keeps a test calling torch.compile in one thread (it reads torch's
    own mock.patch.object); under the hunt's plugin only the test's own mock.patch does."""
    (tmp_path / "test_compiling.py").write_text(COMPILING_TESTS, encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-p", "run-parallel", "-p", "harness.campaign.hunt.plugin"]
    env = {**os.environ, "HARNESS_HUNT_DETECT_IN_TORCH": detect_in_torch}
    proc = subprocess.run(
        [*argv, "--parallel-threads=4", "--collect-only", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"Collected {parallel} items to run in parallel" in proc.stdout, proc.stdout[-2000:]


CRASHING_TESTS = """
import faulthandler
import threading


def test_before():
    assert True


def test_dies_in_its_threads():
    if threading.current_thread() is not threading.main_thread():
        faulthandler._sigsegv()


def test_after():
    assert 1 + 1 == 2
"""


def test_a_test_that_kills_its_process_is_named_and_the_rest_still_run(tmp_path):
    """A segfault in one test's threads leaves no junit report: the progress record names the test
    that was running, and the tests after it run in a second process of the same run."""
    (tmp_path / "test_crashing.py").write_text(CRASHING_TESTS, encoding="utf-8")
    out = tmp_path / "hunt"
    proc = _hunt("--json", "--runs", "2", "--threads", "2", "-o", str(out), "--", str(tmp_path / "test_crashing.py"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    tests = {t["id"].rsplit("::", 1)[-1]: t for t in report["tests"]}
    assert list(tests) == ["test_before", "test_dies_in_its_threads", "test_after"]
    dies = tests["test_dies_in_its_threads"]
    assert dies["failed"] == 2 and dies["runs"] == 2 and dies["threads"] == 2, dies
    assert dies["one_thread"] == "passed" and dies["verdict"] == "race", dies
    assert dies["message"].startswith("ABORT: Segmentation fault"), dies
    assert tests["test_after"]["failed"] == 0 and tests["test_after"]["runs"] == 2
    records = _records(out / RECORDS)
    # the rerun with 1 thread does not crash; alone with 2 threads the test crashes its process again
    assert sorted(r["parts"] for r in records) == [1, 1, 2, 2] and dies["alone"] == "failed"
    assert {r["outcome"] for r in records if r["run"] >= 0} == {"ABORT"}
    assert (out / "run-0-part2").is_dir() and proc.stderr.count("the process died in") == 3  # 2 runs, alone


def test_the_progress_record_of_a_dead_run(tmp_path):
    from harness.campaign.hunt.progress import read_progress

    path = tmp_path / "progress.jsonl"
    lines = [
        {"collected": ["t::a", "t::b", "t::c", "t::d"]},
        {"start": "t::a", "threads": "4"},
        {"end": "t::a", "threads": "4", "outcome": "failed", "message": "boom", "text": "Traceback"},
        {"start": "t::b", "threads": "4"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"end": "t::b", "outc', encoding="utf-8")
    progress = read_progress(path)
    assert [(t.id, t.outcome, t.threads, t.message) for t in progress.done] == [("t::a", "failed", 4, "boom")]
    assert progress.running == "t::b" and progress.running_threads == 4
    assert progress.never_ran == ("t::c", "t::d")
    assert read_progress(tmp_path / "missing.jsonl") is None


def test_a_test_junit_lists_twice_counts_once_with_its_call_failure():
    from harness.campaign.hunt.junit import JunitTest, one_per_test

    call = JunitTest(id="t::a", outcome="failed", threads=4, message="Timeout", text="call")
    teardown = JunitTest(id="t::a", outcome="error", threads=4, message="leaked threads", text="teardown")
    other = JunitTest(id="t::b", outcome="passed", threads=4)
    (a, b) = one_per_test([call, other, teardown])
    assert (a.id, a.outcome, a.message, a.text) == ("t::a", "failed", "Timeout", "call\nteardown")
    assert b == other
    (late,) = one_per_test([JunitTest(id="t::a", outcome="passed", threads=1), teardown])
    assert (late.outcome, late.message) == ("error", "leaked threads")


THROUGH_A_COMPILED_CALL = """
import torch


def wrong(x):
    raise ValueError("the test's own mistake")


def test_fails_inside_a_compiled_call():
    torch.compile(wrong, backend="eager")(torch.ones(2))
"""


def test_torch_source_in_a_traceback_names_no_race(tmp_path):
    """A failure through a compiled call passes eval_frame's frame, whose source quotes F2's
    message: the failure text is Python's traceback, not pytest's source listing, so no race."""
    (tmp_path / "test_through.py").write_text(THROUGH_A_COMPILED_CALL, encoding="utf-8")
    proc = _hunt("--json", "--runs", "1", "--threads", "2", "-o", str(tmp_path / "hunt"), "--", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (test,) = json.loads(proc.stdout)["tests"]
    assert test["verdict"] == "not a race" and test["races"] == [], test
    assert "the test's own mistake" in test["message"], test


def test_the_readme_names_every_key_of_the_json_report():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Hunt races in your test suite", 1)[1].split("\n## ", 1)[0]
    missing = sorted(k for k in TOP_KEYS | TEST_KEYS | {"wilson"} if f"`{k}`" not in section)
    assert not missing, missing


HANGING_TESTS = """
import itertools
import threading

_lock_a, _lock_b = threading.Lock(), threading.Lock()
_turn = itertools.count()


def test_lock_order_deadlock():
    # the copies alternate the order in which they take the two locks
    first, second = (_lock_a, _lock_b) if next(_turn) % 2 else (_lock_b, _lock_a)
    with first:
        threading.Event().wait(0.5)
        with second:
            pass


def test_after():
    assert True
"""


def test_a_hung_test_is_cut_and_named_with_a_dump_of_its_threads(tmp_path):
    """pytest-timeout cuts the deadlocked test and the run goes on; its threads keep the process from
    exiting, the runner's py-spy dump shows them in the test, and the report links that dump to it."""
    (tmp_path / "test_hanging.py").write_text(HANGING_TESTS, encoding="utf-8")
    out = tmp_path / "hunt"
    args = ["--json", "--runs", "1", "--threads", "4", "--test-timeout", "5", "-o", str(out)]
    proc = _hunt(*args, "--", str(tmp_path / "test_hanging.py"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    tests = {t["id"].rsplit("::", 1)[-1]: t for t in report["tests"]}
    hung, after = tests["test_lock_order_deadlock"], tests["test_after"]
    assert "Timeout" in hung["message"] and hung["failed"] == 1, hung
    assert after["failed"] == 0 and after["runs"] == 1
    (run,) = [f for f in report["run_failures"] if f["run"] == 0]
    assert run["outcome"] == "HANG", run
    # the run's dump, and the rerun alone's: with the same threads it deadlocks again
    assert [Path(d).parent.name for d in hung["dumps"]] == ["run-0", "alone-0"] and hung["alone"] == "failed"
    assert all("test_lock_order_deadlock" in Path(d).read_text() for d in hung["dumps"])
    assert after["dumps"] == []


ORDER_DEPENDENT_TESTS = """
import threading

LEFT = []


def test_leaves_state_behind():
    LEFT.append(threading.get_ident())


def test_fails_after_it_with_threads():
    # fails where an earlier test left state and another copy runs beside it
    assert not (LEFT and threading.current_thread() is not threading.main_thread())


def test_fails_alone_with_threads_too():
    assert threading.current_thread() is threading.main_thread()
"""


def test_a_test_failing_after_another_is_told_from_its_own_race(tmp_path):
    """Both tests fail in every run with threads and pass with one. Alone with the same threads the
    first still passes (the earlier test's state failed it): `after another test`, not a race; the
    second still fails: a race of its own."""
    (tmp_path / "test_order.py").write_text(ORDER_DEPENDENT_TESTS, encoding="utf-8")
    out = tmp_path / "hunt"
    proc = _hunt("--json", "--runs", "2", "--threads", "2", "-o", str(out), "--", str(tmp_path / "test_order.py"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    tests = {t["id"].rsplit("::", 1)[-1]: t for t in json.loads(proc.stdout)["tests"]}
    after, own = tests["test_fails_after_it_with_threads"], tests["test_fails_alone_with_threads_too"]
    assert (after["one_thread"], after["alone"], after["verdict"]) == ("passed", "passed", "after another test"), after
    assert (own["one_thread"], own["alone"], own["verdict"]) == ("passed", "failed", "race"), own
    assert tests["test_leaves_state_behind"]["alone"] is None
    assert proc.stderr.count("rerun alone with 2 threads") == 2 and (out / "alone-0").is_dir()
    resumed = _hunt("--json", "--runs", "2", "--threads", "2", "-o", str(out), "--", str(tmp_path / "test_order.py"))
    assert "hunt: " not in resumed.stderr and json.loads(resumed.stdout)["tests"] == list(tests.values())


def test_the_rerun_with_one_thread_starts_while_the_last_run_goes_on(tmp_path):
    """Three runs on two workers: the worker with nothing left to take reruns the deterministic test
    with one thread beside the third run, not after it."""
    out = tmp_path / "hunt"
    proc = _hunt("--json", "--runs", "3", "--workers", "2", "-o", str(out), "--", SUITE, "-k", "deterministic or clean")
    assert proc.returncode == 0, proc.stderr[-3000:]  # not a race: nothing for the user to fix here
    starts = {r["folder"]: _started_at(out / r["folder"]) for r in _records(out / RECORDS)}
    ends = {r["folder"]: starts[r["folder"]] + r["duration_s"] for r in _records(out / RECORDS)}
    assert set(starts) == {"run-0", "run-1", "run-2", "rerun-1-thread"}, starts
    assert starts["rerun-1-thread"] < ends["run-2"], (starts, ends)
    (det,) = [t for t in json.loads(proc.stdout)["tests"] if t["id"] == DETERMINISTIC]
    assert det["one_thread"] == "failed" and det["verdict"] == "not a race"


def _started_at(folder: Path) -> float:
    return datetime.fromisoformat(json.loads((folder / "result.json").read_text())["started_at"]).timestamp()
