"""hunt's table: one row per test id, the whole id (a long one on its own line above its counts, so
two tests of one file read apart), and what the counts count."""

from __future__ import annotations

from types import SimpleNamespace

from harness.campaign.hunt.records import ONE_THREAD, RunRecord
from harness.campaign.hunt.records import TestRecord as Tested
from harness.campaign.hunt.report import ID_WIDTH, WIDTH, table
from harness.campaign.hunt.verdicts import TestVerdict as Verdict
from harness.campaign.hunt.verdicts import verdicts
from harness.diagnosis.side_by_side import ArmCount

LONG = "tests/augmentation/test_container.py::TestAugmentationSequential::test_forward_and_inverse[cpu-float32-{}]"


def _verdict(tid: str, failed: int = 0) -> Verdict:
    arm = ArmCount(fixes=None, failed=failed, runs=3, races=())
    return Verdict(id=tid, threads=4, arms=(arm,), verdict="race" if failed else "ok", why="")


def test_long_ids_stand_whole_and_short_ones_keep_one_row():
    found = [_verdict("t.py::test_a"), _verdict(LONG.format("a"), 2), _verdict(LONG.format("b"))]
    rows = table(SimpleNamespace(fix_sets=[None]), found)
    assert rows[0].split()[:3] == ["test", "thr", "failed"]
    assert rows[1].startswith("t.py::test_a ") and "0/3" in rows[1]
    whole = [r for r in rows if r.startswith("tests/augmentation")]
    assert whole == [LONG.format("a"), LONG.format("b")] and all(len(r) <= WIDTH for r in rows)
    counts = rows[rows.index(LONG.format("a")) + 1]
    assert counts[:ID_WIDTH].strip() == "" and "2/3" in counts and counts.endswith("race")


def test_a_run_that_pytest_reported_reads_in_pytests_words():
    from harness.campaign.hunt.engine import _ending
    from harness.campaign.hunt.records import RunRecord

    def record(outcome, rc, tests=()):
        return RunRecord(
            run=0, arm=0, seed=0, outcome=outcome, rc=rc, detail="", duration_s=1.0, folder="run-0", tests=tests
        )

    assert _ending(record("CRASH", 1)) == "tests failed (pytest exit 1)"
    assert _ending(record("OK", 0)) == "passed (pytest exit 0)"
    assert _ending(record("CRASH", 1, tests=None)) == "CRASH"  # no report: the process's own ending
    assert _ending(record("ABORT", -11)) == "ABORT" and _ending(record("HANG", -9)) == "HANG"


def test_a_process_that_crashed_after_its_last_test_is_said_with_its_native_frames(tmp_path):
    from harness.campaign.hunt.records import RunRecord, TestRecord
    from harness.campaign.hunt.report import findings, to_json

    (tmp_path / "run-0").mkdir()
    frames = ["libtorch_python.so(+0x1) ExtraState::invalidate", "libpython3.11.so(+0x2) subtract_refs"]
    (tmp_path / "run-0" / "native_stack.txt").write_text("# vm: 2 frames, innermost first\n" + "\n".join(frames))
    done = (TestRecord(id="t.py::test_a", outcome="passed", threads=4, single_reason="", message="", races=()),)
    crash = RunRecord(
        run=0, arm=0, seed=0, outcome="ABORT", rc=-11, detail="Segmentation fault", duration_s=3.0,
        folder="run-0", tests=done,
    )  # fmt: skip
    opts = SimpleNamespace(out_dir=tmp_path, fix_sets=[None], key=SimpleNamespace(to_json=dict), runs=1)
    lines = findings(opts, [], [crash])
    assert lines[0].startswith("- run-0: ABORT after its last test Segmentation fault")
    assert [line.strip() for line in lines[1:]] == frames
    (entry,) = to_json(opts, [], [crash], 3.0, 0)["run_failures"]
    assert entry["after_last_test"] and entry["native"] == frames


def test_a_junit_report_torn_by_a_death_reads_as_none_and_the_progress_record_stands_in(tmp_path):
    from harness.campaign.hunt.progress import JUNIT, PROGRESS, process_tests

    (tmp_path / JUNIT).write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest"><testcase class')
    lines = ['{"collected": ["t.py::test_a", "t.py::test_b"]}', '{"start": "t.py::test_a", "threads": 4}']
    (tmp_path / PROGRESS).write_text("\n".join(lines) + "\n")
    tests, progress = process_tests(tmp_path)
    assert progress is not None and progress.running == "t.py::test_a" and tests == ()


def test_a_report_of_no_test_where_tests_ran_is_pytests_own_failure_and_the_running_test_is_named(tmp_path):
    """A doctest in 4 threads left linecache patched in a loop, and pytest's reporting died of a
    RecursionError: its junit report held one nameless testcase. That is no test that passed."""
    from harness.campaign.hunt.junit import read_junit
    from harness.campaign.hunt.progress import JUNIT, PROGRESS, process_tests

    nameless = '<testsuites><testsuite name="pytest" tests="0"><testcase time="0.000" /></testsuite></testsuites>'
    (tmp_path / JUNIT).write_text(nameless)
    assert read_junit(tmp_path / JUNIT) == []
    lines = ['{"collected": ["t.py::test_doc", "t.py::test_b"]}', '{"start": "t.py::test_doc", "threads": "4"}']
    (tmp_path / PROGRESS).write_text("\n".join(lines) + "\n")
    tests, progress = process_tests(tmp_path)
    assert tests == () and progress.running == "t.py::test_doc" and progress.never_ran == ("t.py::test_b",)
    (tmp_path / PROGRESS).write_text(lines[0] + "\n")  # nothing started: the empty report stands
    assert process_tests(tmp_path) == ((), None)


def _run(index: int, outcome: str, threads: int = 4) -> RunRecord:
    test = Tested(id="t.py::test_x", outcome=outcome, threads=threads)
    return RunRecord(
        run=index, arm=0, seed=0, outcome="OK", rc=0, detail="", duration_s=1.0, folder=f"r{index}", tests=(test,)
    )


def test_an_early_rerun_with_one_thread_answers_only_for_a_test_that_failed_in_every_run():
    """The rerun may start before the last run ends; a test that then passed is flaky with threads
    (a race), whatever it did alone."""
    early = _run(ONE_THREAD, "failed", threads=1)
    (flaky,) = verdicts([_run(0, "failed"), _run(1, "failed"), early, _run(2, "passed")], [None])
    assert flaky.verdict == "race" and flaky.one_thread is None, flaky
    (always,) = verdicts([_run(0, "failed"), _run(1, "failed"), early, _run(2, "failed")], [None])
    assert always.verdict == "not a race" and always.one_thread == "failed", always
