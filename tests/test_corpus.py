"""The foreign corpus (tests/foreign/corpus.toml): programs written outside the harness, public bug
reports rewritten as programs among them. The table is whole, and the fast subset (one of each kind
of answer: a thread's exception at exit 0, two races in one run, a deadlock of the program's own
locks, a deterministic error, a clean program, a recompile limit at exit 0, a public report) gets
the expected answer from stress and diagnose. `python -m tools.corpus` runs them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import corpus

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_holds_every_program_and_the_public_record():
    programs = corpus.load()
    listed = {p.path for p in programs}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "foreign").rglob("*.py")}
    assert on_disk <= listed, sorted(on_disk - listed)
    assert len(programs) >= 30
    public = [p for p in programs if not p.source.startswith("user shape")]
    assert len({p.source for p in public}) >= 15
    assert {p.expect for p in programs} >= {"OK", "CRASH", "ABORT", "HANG", "TIMEOUT", "DETERMINISTIC"}
    assert any(p.device == "cuda" for p in programs)


FAST = [p for p in corpus.load() if p.fast and p.device == "cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("program", FAST, ids=lambda p: p.name)
def test_a_fast_program_gets_its_expected_answer(program):
    found = corpus.run_one(program, python=sys.executable)
    assert found.ok, f"{found.verdict}; outcomes {found.outcomes}, races {found.found_races}"


def test_stress_calling_a_failure_deterministic_is_read_in_either_wording():
    assert corpus.said_deterministic("a deterministic failure, not a race: each of the first 3 runs failed ...")
    assert corpus.said_deterministic(
        "your program fails this way on its own, not by a race: it started no thread, and ... F2's; stopped\n"
    )
    assert not corpus.said_deterministic("3 runs completed, 3 failures (100.00%)\nnot a race: quoted later\n")


# ------------------------------------------------------------------ fixes side by side (--fixes)

# stress's side-by-side report as harness/campaign/stress/engine.py `_arm_table` prints it, then the
# summary lines that follow it (the races column is newer; both forms must read the same).
ARM_TABLE = """\
4 runs over 33s; run i of every set had plan seed i
fixes                               failed        Wilson 95%  median run  vs first  races
none                                   2/2   [34.2%, 100.0%]       8.49s     1.00x  F2 2
nested-fx-fallback                     0/2     [0.0%, 65.8%]       8.38s     0.99x  -
run time: min 6.55s, median 8.49s, max 10.21s; outcomes: CRASH:2 OK:2
  2 x fx-trace-of-dynamo-fn (RuntimeError in ? at torch._dynamo.eval_frame:compile_wrapper)
"""

ARM_TABLE_OLD = """\
6 runs over 1m02s; run i of every set had plan seed i
fixes                               failed        Wilson 95%  median run  vs first
as is                                  3/3   [43.9%, 100.0%]       4.10s     1.00x
cstash-tls-init,global-lock,cublas-handle-init    1/3    [6.1%, 79.2%]       4.30s     1.05x
run time: min 3.9s, median 4.2s, max 4.4s; outcomes: CRASH:4 OK:2
"""


def program(**kw) -> corpus.Program:
    base = dict(name="p", path="x.py", args=(), source="user shape: test", device="cpu", expect="CRASH", races=())
    return corpus.Program(**(base | kw))


def test_the_arm_table_reads_each_sets_failed_column():
    rows = corpus.arm_rows(ARM_TABLE)
    assert {k: (a.failed, a.runs) for k, a in rows.items()} == {"none": (2, 2), "nested-fx-fallback": (0, 2)}
    assert rows["none"].row.endswith("F2 2")
    old = corpus.arm_rows(ARM_TABLE_OLD)
    # a set's name may hold a space (`as is`) or outrun the 32-character column
    assert {k: (a.failed, a.runs) for k, a in old.items()} == {
        "as is": (3, 3),
        "cstash-tls-init,global-lock,cublas-handle-init": (1, 3),
    }


def test_the_arm_table_is_found_among_other_lines_and_absent_without_its_header():
    noisy = "stress: `python` in CMD runs /x/python\n--- run 0 [none]: CRASH\n 1/2 apples\n" + ARM_TABLE
    assert list(corpus.arm_rows(noisy)) == ["none", "nested-fx-fallback"]
    # a single-set report has no table: its `3 runs completed` line is no row
    assert corpus.arm_rows("3 runs completed, 3 failures (100.00%), over 20s\noutcomes: CRASH:3\n") == {}
    assert corpus.arm_rows("") == {}


def test_the_raw_and_fixed_rows_are_picked_by_name_whatever_the_order():
    rows = corpus.arm_rows(ARM_TABLE_OLD.replace("as is", "none"))
    raw, fixed = corpus.pick_arms(rows, ("global-lock", "cublas-handle-init", "cstash-tls-init"))
    assert (raw.failed, fixed.failed) == (3, 1)
    # two rows naming neither set: the order given (`--fix none` first)
    raw, fixed = corpus.pick_arms(corpus.arm_rows(ARM_TABLE_OLD), ("stash-incref",))
    assert (raw.failed, fixed.failed) == (3, 1)
    assert corpus.pick_arms({}, ("global-lock",)) is None


def fix_found(raw: tuple[int, int], fixed: tuple[int, int], *, holds: bool = True) -> corpus.FixFound:
    return corpus.FixFound(
        name="p",
        expect="CRASH",
        fix="global-lock",
        fix_holds=holds,
        raw_failed=raw[0],
        raw_runs=raw[1],
        fixed_failed=fixed[0],
        fixed_runs=fixed[1],
    )


@pytest.mark.parametrize(
    ("expect", "holds", "raw", "fixed", "verdict"),
    [
        ("CRASH", True, (2, 4), (0, 4), "as expected"),
        ("CRASH", True, (0, 4), (0, 4), "differs: raw did not fail (0/4; expected CRASH)"),
        ("CRASH", True, (4, 4), (1, 4), "differs: global-lock did not hold (1/4 failed)"),
        ("HANG", False, (4, 4), (3, 4), "as expected"),
        ("HANG", False, (4, 4), (0, 4), "differs: global-lock held (0/4; the entry expects it not to)"),
        ("OK", True, (0, 3), (0, 3), "as expected"),
        ("OK", True, (1, 3), (0, 3), "differs: raw failed 1/3 (expected OK)"),
        ("DETERMINISTIC", False, (3, 3), (3, 3), "as expected"),
        ("CRASH", True, (0, 0), (0, 0), "differs: no completed runs (raw 0/0, fixed 0/0)"),
    ],
)
def test_a_fix_verdict_wants_raw_failing_and_the_fix_holding(expect, holds, raw, fixed, verdict):
    p = program(expect=expect, fix=("global-lock",), fix_holds=holds)
    assert corpus.judge_fix(p, fix_found(raw, fixed, holds=holds)) == verdict


@pytest.mark.parametrize(
    ("raw", "races", "fixed", "verdict"),
    [
        ((0, 4), "-", (0, 4), "as expected"),
        ((1, 4), "F2 1", (0, 4), "as expected"),
        ((1, 4), "F2 1", (1, 4), "differs: global-lock did not hold (1/4 failed)"),
        ((2, 4), "F2 1, F10 1", (0, 4), "differs: raw failed as F2, F10 (expected F2)"),
        ((1, 4), "-", (0, 4), "differs: raw failed as no catalogued race (expected F2)"),
    ],
)
def test_a_rare_race_may_spare_every_raw_run_but_not_fail_another_way(raw, races, fixed, verdict):
    p = program(expect="CRASH", races=("F2",), fix=("global-lock",), rare=True)
    f = fix_found(raw, fixed)
    f.rows = [f"none {raw[0]}/{raw[1]}     [4.6%, 69.9%]      26.39s     1.00x  {races}", "global-lock ..."]
    assert corpus.judge_fix(p, f) == verdict


def test_an_arm_rows_races_are_its_last_column():
    assert corpus.row_races("none    4/4   [51.0%, 100.0%]  31.43s  1.00x  F1 4, F1c 3, capture 2") == [
        "F1",
        "F1c",
        "capture",
    ]
    assert corpus.row_races("global-lock    0/4     [0.0%, 49.0%]      25.90s     0.98x  -") == []
    assert corpus.row_races("as is   3/3   [43.9%, 100.0%]   4.10s   1.00x") == []  # before the column existed


@pytest.mark.parametrize(
    ("rare", "outcomes", "races", "verdict"),
    [
        (True, {"OK": 4}, [], "as expected"),
        (True, {"OK": 3, "CRASH": 1}, ["F2"], "as expected"),
        (True, {"OK": 3, "CRASH": 1}, ["F3"], "differs: races ['F3'] (expected ['F2'])"),
        (False, {"OK": 4}, [], "differs: no CRASH run (outcomes {'OK': 4}); races ['none'] (expected ['F2'])"),
    ],
)
def test_a_rare_race_is_judged_by_the_races_of_the_runs_it_failed(rare, outcomes, races, verdict):
    p = program(expect="CRASH", races=("F2",), rare=rare)
    found = corpus.Found(name="p", expect="CRASH", races=["F2"], warnings=[], outcomes=outcomes, found_races=races)
    assert corpus.judge(p, found) == verdict


def test_stress_output_is_read_into_a_verdict_or_says_why_not():
    p = program(fix=("nested-fx-fallback",))

    def read(stdout: str, rc: int = 1, stderr: str = "") -> corpus.FixFound:
        f = corpus.FixFound(name="p", expect="CRASH", fix="nested-fx-fallback", fix_holds=True)
        corpus.read_fix_run(p, f, subprocess.CompletedProcess([], rc, stdout, stderr))
        return f

    good = read(ARM_TABLE)
    assert (good.raw_failed, good.raw_runs, good.fixed_failed, good.fixed_runs, good.verdict) == (
        2,
        2,
        0,
        2,
        "as expected",
    )
    assert corpus.fix_row(good)["raw"] == "2/2" and corpus.fix_row(good)["as_expected"] is True
    assert (
        read("", 2, "error: --fix: unknown fix 'x'").verdict
        == "differs: stress refused it: error: --fix: unknown fix 'x'"
    )
    assert read("3 runs completed\n").verdict == "differs: no side-by-side table in stress's output (exit 1)"


def test_a_gpu_entry_on_a_host_without_cuda_is_skipped_unrun():
    p = program(device="cuda", fix=("cstash-tls-init", "global-lock"))
    f = corpus.run_fix(p, python=sys.executable, cuda=False)
    assert f.skipped and f.verdict.startswith("skipped") and f.raw_runs == 0
    assert "1 skipped" in corpus.fix_table([f], torch="t", host="h")


def test_an_entrys_fix_must_be_registry_fixes_with_hooks(tmp_path):
    def entry(fix: str) -> Path:
        path = tmp_path / "c.toml"
        path.write_text(
            f'[[program]]\nname = "a"\npath = "{FAST[0].path}"\nexpect = "CRASH"\nfix = "{fix}"\nfix_holds = false\n'
        )
        return path

    (p,) = corpus.load(entry("cstash-tls-init, global-lock"))
    assert p.fix == ("cstash-tls-init", "global-lock") and p.fix_holds is False
    with pytest.raises(corpus.CorpusError, match="not a registry fix"):
        corpus.load(entry("global-lok"))
    with pytest.raises(corpus.CorpusError, match="policy"):
        corpus.load(entry("sequential-startup"))


def test_every_entry_with_a_fix_is_a_program_and_fixes_selects_only_those():
    programs = corpus.load()
    with_fix = [p for p in programs if p.fix]
    assert any(p.name == "serve_while_tracing_example" for p in with_fix)
    a = corpus.parse_args(["--fixes", "--device", "all"])
    assert corpus.choose(programs, a) == with_fix
    with pytest.raises(corpus.CorpusError, match="name no fix"):
        corpus.choose(programs, corpus.parse_args(["--fixes", "--only", "missing_import"]))


@pytest.mark.slow
def test_the_readme_example_fails_raw_and_holds_under_its_fix_side_by_side(tmp_path):
    # F2 fails most requests of a raw run (switch interval 1 us), yet 1 raw run in 35 under stress
    # here failed none: three runs a set, two at a time (~25 s), so that one quiet run is not a verdict.
    (p,) = [p for p in corpus.load() if p.name == "serve_while_tracing_example"]
    f = corpus.run_fix(p, python=sys.executable, runs=3, parallel=2, keep=tmp_path)
    assert f.ok, f"{f.verdict}; rows {f.rows}"
    # --keep: the raw arm's failing run stays, with a diagnosis that names it
    kept = tmp_path / p.name
    assert any(x.is_dir() for x in kept.iterdir())
    assert "F2" in (kept / "diagnosis.txt").read_text()


def test_an_also_set_is_read_from_the_same_table_and_measured_not_judged():
    p = program(fix=("global-lock",), fix_holds=False)
    table = ARM_TABLE_OLD.replace("as is", "none").replace(
        "cstash-tls-init,global-lock,cublas-handle-init    1/3",
        "global-lock                            2/3 \ncublas-handle-init,global-lock,cstash-tls-init    0/3",
    )
    f = corpus.FixFound(name="p", expect="CRASH", fix="global-lock", fix_holds=False)
    also = (("cstash-tls-init", "global-lock", "cublas-handle-init"), ("stream-sync",))
    corpus.read_fix_run(p, f, subprocess.CompletedProcess([], 1, table, ""), also)
    assert (f.raw_failed, f.fixed_failed, f.verdict) == (3, 2, "as expected")
    assert [(a["fix"], a["failed"], a["runs"]) for a in f.also] == [
        ("cstash-tls-init,global-lock,cublas-handle-init", 0, 3),
        ("stream-sync", 0, 0),  # not in the table: no runs, said so in the table as '-'
    ]
    text = corpus.fix_table([f], torch="t", host="h")
    assert "| p | cstash-tls-init,global-lock,cublas-handle-init | 0/3 |" in text and "| p | stream-sync | - |" in text
    assert "| p | CRASH | global-lock (should not hold) | 3/3 | 2/3 |" in text


def test_the_fix_column_says_what_the_entry_expects_and_when_raw_never_failed():
    f = corpus.FixFound(name="p", expect="CRASH", fix="global-lock", fix_holds=True)
    f.raw_failed, f.raw_runs, f.fixed_failed, f.fixed_runs = 0, 4, 0, 4
    assert "| p | CRASH | global-lock (should hold; untested, raw never failed) | 0/4 | 0/4 |" in corpus.fix_table(
        [f], torch="t", host="h"
    )
    f.raw_failed = 1
    assert "| p | CRASH | global-lock (should hold) | 1/4 | 0/4 |" in corpus.fix_table([f], torch="t", host="h")
    assert corpus.main(["--also", "global-lock"]) == 2
