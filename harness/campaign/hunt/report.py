"""`harness hunt`'s report: a table per test id (120 columns, legend under it), then the
findings; or, with `--json`, the same as one JSON object:

    {
      "pytest_args": [str], "runs": int, "threads": int, "plan": str | null,
      "fix_sets": [null | [str]],        # null: as is; []: `--fix none`
      "out_dir": str, "elapsed_s": float,
      "tests": [{
        "id": str,                       # pytest's node id
        "threads": int,                  # threads its body ran in (1: kept single by pytest-run-parallel)
        "single_reason": str,            # why it was kept single ('' if it was not)
        "failed": int, "runs": int,      # over all fix sets
        "arms": [{"fixes": null | [str], "failed": int, "runs": int, "wilson": [float, float]}],
        "races": [str],                  # catalogued races its failure texts named (R4, F2, ...)
        "one_thread": "passed" | "failed" | null,   # the rerun with --parallel-threads 1
        "alone": "passed" | "failed" | null,        # the rerun alone with the same threads
        "verdict": "race" | "not a race" | "not thread-safe" | "after another test" | "flaky" | "ok" | "skipped",
        "why": str, "message": str,      # the verdict's reason; the first failure's line
        "holds": [str],                  # fix sets with 0 failures where another set failed
        "dumps": [str]                   # hang dumps whose threads were still in this test at exit
      }],
      "run_failures": [{"run": int, "outcome": str, "rc": int | null, "detail": str,
                        "races": [str], "folder": str,     # runs that ended outside pytest's report
                        "after_last_test": bool,            # crashed once every test was reported
                        "native": [str]}],                  # the crash's innermost native frames
      "races": [str],                    # every race named, tests' and runs'
      "exit": 0 | 1                      # 1: some test shows a race (or a run named one)
    }
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.campaign.hunt.junit import CRASHED, FAILING
from harness.campaign.hunt.options import HuntOptions
from harness.campaign.hunt.progress import process_tests
from harness.campaign.hunt.records import RECORDS, RunRecord
from harness.campaign.hunt.verdicts import RACE, TestVerdict, split_races
from harness.diagnosis import diagnose
from harness.diagnosis.side_by_side import arm_name
from harness.text import clip
from harness.trial.folder import HANG_DUMP, NATIVE_STACK

WIDTH = 120
ID_WIDTH = 52
LEGEND = (
    "thr: threads pytest-run-parallel ran the test body in (1: its marker or own detection kept the test "
    "single); failed: runs in which the test failed (failed, error, or its process died in it) / runs; a long "
    "id stands whole on its own line above its counts; Wilson 95%: the failure rate's interval; "
    "1 thread: the rerun with --parallel-threads 1 of a test failing in every run; verdict: race (a "
    "catalogued race named, or it fails only with threads), not a race (it fails with 1 thread too), "
    "not thread-safe (the test's own state: a swapped sys.stdout, pytest.warns, a global it writes), "
    "after another test (it also passed alone with the same threads: an earlier test's state), "
    "flaky (fails now and then in 1 thread), ok"
)
_RUN_LEVEL = ("HANG", "TIMEOUT", "ABORT")


def print_report(opts: HuntOptions, found: list[TestVerdict], records: Sequence[RunRecord], elapsed_s: float) -> int:
    """Print the report; the exit status: 1 where a test shows a race (or a run named one), else 0."""
    failures = run_failures(records)
    rc = 1 if any(v.verdict == RACE for v in found) or any(split_races(f.races)[0] for f in failures) else 0
    if opts.as_json:
        print(json.dumps(to_json(opts, found, failures, elapsed_s, rc), indent=1))
    else:
        print("\n".join(_text(opts, found, failures, records, elapsed_s)))
    if opts.own_dir and rc == 0 and not any(v.failed for v in found) and not failures:
        shutil.rmtree(opts.out_dir, ignore_errors=True)
    elif not opts.as_json:
        print(f"runs' artefacts and {RECORDS}: {opts.out_dir} (the same -o resumes or extends the hunt)")
    return rc


def run_failures(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Runs that ended outside pytest's report: no report at all, or a hang, deadline or crash."""
    return [r for r in records if r.tests is None or r.outcome in _RUN_LEVEL]


def to_json(
    opts: HuntOptions, found: list[TestVerdict], failures: list[RunRecord], elapsed_s: float, rc: int
) -> dict[str, Any]:
    races = [race for v in found for race in v.races] + [race for f in failures for race in f.races]
    return {
        **opts.key.to_json(),
        "runs": opts.runs,
        "out_dir": str(opts.out_dir),
        "elapsed_s": round(elapsed_s, 1),
        "tests": [_test_json(v, stuck_dumps(opts.out_dir, v.id, failures)) for v in found],
        "run_failures": [
            {
                "run": f.run,
                "outcome": f.outcome,
                "rc": f.rc,
                "detail": f.detail,
                "races": list(f.races),
                "folder": f.folder,
                "after_last_test": _after_last_test(f),
                "native": native_frames(opts.out_dir / f.folder),
            }
            for f in failures
        ],
        "races": list(dict.fromkeys(races)),
        "exit": rc,
    }


def _test_json(v: TestVerdict, dumps: list[Path]) -> dict[str, Any]:
    arms = [
        {"fixes": None if a.fixes is None else list(a.fixes), "failed": a.failed, "runs": a.runs}
        | {"wilson": [round(a.wilson.low, 4), round(a.wilson.high, 4)]}
        for a in v.arms
    ]
    return {
        "id": v.id,
        "threads": v.threads,
        "single_reason": v.single_reason,
        "failed": v.failed,
        "runs": v.runs,
        "arms": arms,
        "races": list(v.races),
        "one_thread": v.one_thread,
        "alone": v.alone,
        "verdict": v.verdict,
        "why": v.why,
        "message": v.message,
        "holds": list(v.holds),
        "dumps": [str(d) for d in dumps],
    }


def _text(
    opts: HuntOptions,
    found: list[TestVerdict],
    failures: list[RunRecord],
    records: Sequence[RunRecord],
    elapsed_s: float,
) -> list[str]:
    main = [r for r in records if not r.rerun]
    # The arguments last: a long list is clipped, the counts and the time are not.
    head = (
        f"hunt: {len(main)} run{'s' if len(main) != 1 else ''} x {opts.threads} threads a test"
        f"{f', plan {opts.plan}' if opts.plan else ''}, over {elapsed_s:.1f}s: `pytest {shlex.join(opts.pytest_args)}`"
    )
    out = [clip(head, WIDTH), *table(opts, found), *textwrap.wrap("legend: " + LEGEND, WIDTH), ""]
    out += findings(opts, found, failures)
    out += _diagnosis(opts, found, records)
    return out


def table(opts: HuntOptions, found: list[TestVerdict]) -> list[str]:
    arms = len(opts.fix_sets) > 1
    counts = (
        " ".join(f"{clip(arm_name(f), 11):>11}" for f in opts.fix_sets) if arms else f"{'failed':>7} {'Wilson 95%':>15}"
    )
    rows = [f"{'test':<{ID_WIDTH}} {'thr':>3} {counts} {'1 thread':>8}  verdict"]
    for v in found:
        if arms:
            cells = " ".join(f"{f'{a.failed}/{a.runs}':>11}" for a in v.arms)
        else:
            ci = v.arms[0].wilson
            cells = f"{f'{v.failed}/{v.runs}':>7} {f'[{100 * ci.low:.0f}%, {100 * ci.high:.0f}%]':>15}"
        verdict = v.verdict + (f": {', '.join(v.races)}" if v.races and v.verdict == RACE else "")
        *whole, last = _id_lines(v.id)
        rows += whole
        rows.append(clip(f"{last:<{ID_WIDTH}} {v.threads:>3} {cells} {v.one_thread or '-':>8}  {verdict}", WIDTH))
    return rows


def _id_lines(tid: str) -> list[str]:
    """The full test id: one cell where it fits, else its own lines (wrapped at WIDTH) above the
    row's counts, so that two tests of one file always read apart."""
    if len(tid) <= ID_WIDTH:
        return [tid]
    return [*(tid[i : i + WIDTH] for i in range(0, len(tid), WIDTH)), ""]


def findings(opts: HuntOptions, found: list[TestVerdict], failures: list[RunRecord]) -> list[str]:
    """Each failing test's verdict and why, the fix sets that held, the tests kept in one thread,
    and the runs that ended outside pytest's report."""
    out = []
    for v in found:
        if v.failed:
            holds = f"; holds: {', '.join(v.holds)}" if v.holds else ""
            out.append(clip(f"- {v.id}: {v.why} (failed {v.failed}/{v.runs}){holds}", WIDTH))
            out.append(clip(f"    {v.message}", WIDTH))
            out += [f"    its threads were still in it at exit: {d}" for d in stuck_dumps(opts.out_dir, v.id, failures)]
    single = [v for v in found if v.threads == 1 and opts.threads > 1 and v.single_reason]
    for v in single:
        out.append(clip(f"- {v.id}: ran in 1 thread ({v.single_reason}): no race between its copies", WIDTH))
    for f in failures:
        races = f"; races: {', '.join(f.races)}" if f.races else ""
        after = " after its last test" if _after_last_test(f) else ""
        out.append(
            clip(f"- {f.folder}: {f.outcome}{after} {f.detail}{races}; artefacts: {opts.out_dir / f.folder}", WIDTH)
        )
        out += [clip(f"    {frame}", WIDTH) for frame in native_frames(opts.out_dir / f.folder)]
    return out or ["no test failed"]


NATIVE_SHOWN = 4
"""Innermost native frames shown under a run whose process crashed."""


def _after_last_test(f: RunRecord) -> bool:
    """The process crashed once pytest had reported every test it ran: at exit, in a finaliser or
    a thread left behind, not in a test."""
    return f.outcome == "ABORT" and f.tests is not None and not any(t.outcome == CRASHED for t in f.tests)


def native_frames(folder: Path) -> list[str]:
    """The crashing thread's innermost native frames (the runner's native_stack.txt), if any."""
    path = folder / NATIVE_STACK
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")][:NATIVE_SHOWN]


def stuck_dumps(out_dir: Path, tid: str, failures: Sequence[RunRecord]) -> list[Path]:
    """The hang dumps (py-spy's, taken by the runner) of runs whose threads were still in this test's
    function when the process could not exit: pytest-timeout cut the test, its threads never
    returned, and the dump shows where they wait."""
    name = tid.rsplit("::", 1)[-1].split("[", 1)[0]
    found = []
    for f in failures:
        for folder in f.part_folders if f.outcome == "HANG" else ():
            path = out_dir / folder / HANG_DUMP
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            if re.search(rf"\b{re.escape(name)}\b", text):
                found.append(path)
    return found


def _diagnosis(opts: HuntOptions, found: list[TestVerdict], records: Sequence[RunRecord]) -> list[str]:
    """The diagnosis of each racing test's first failure (its fixes, its repro), brief."""
    failures = [f for v in found if v.verdict == RACE and v.races for f in _first_failure(opts.out_dir, v.id, records)]
    if not failures:
        return []
    found = diagnose.diagnose(failures)
    for f in found:
        f.try_fixes = _hunt_command(f.try_fixes, opts.pytest_args)
    return ["", diagnose.render(found, brief=True, unit="test")]


def _hunt_command(stress_command: str, pytest_args: Sequence[str]) -> str:
    """The diagnosis's `stress --fix ...` advice as the hunt that tries the same fix sets."""
    m = re.search(r"(--fix none(?: --fix \S+)*) -- ", stress_command)
    if m is None:
        return stress_command
    return f"python -m harness hunt {m.group(1)} -- {shlex.join(pytest_args)}"


def _first_failure(out_dir: Path, tid: str, records: Sequence[RunRecord]) -> list[diagnose.Failure]:
    """The test's first failure that named a race, read back from the process it ran in."""
    for r in sorted(records, key=lambda r: r.run):
        if r.rerun or not any(t.id == tid and t.outcome in FAILING and t.races for t in r.tests or ()):
            continue
        for name in r.part_folders:
            found = _failure_in(out_dir / name, tid)
            if found:
                return found
    return []


def _failure_in(folder: Path, tid: str) -> list[diagnose.Failure]:
    """The test's failure in one process's folder: its text from the junit report or the progress
    record, or, where the test killed the process, the folder's own failure (its crash, its dumps)."""
    tests, progress = process_tests(folder)
    if progress is not None and progress.running == tid:
        try:
            return diagnose.collect([str(folder)])
        except diagnose.DiagnoseError:
            return []
    text = next((t.text for t in tests or () if t.id == tid and t.outcome in FAILING), None)
    return diagnose.failures_in_text(text, source=f"{tid} ({folder.name})") if text else []
