"""`python -m harness hunt [options] -- PYTEST_ARGS`: the user's own pytest suite as the race finder.

Runs the suite `--runs` times (per fix set) under pytest-run-parallel, each test body in
`--threads` threads at once, each run an isolated process through the runner (hang dumps, native
stacks, the lifeline, the fixes' bootstrap) on this host or a Ray cluster (harness.campaign.backends),
`--workers` runs at once over the campaign's worker loop; reads each run's junit report
(harness.campaign.hunt.junit) and names each failing test's race from its own failure text
(`diagnose`); a test failing in every run is rerun once with one thread, and one that passes there
and names no race is rerun alone in its own process with the same threads
(harness.campaign.hunt.verdicts says what each test is; hunt_report prints it). The rerun with one
thread starts as soon as a worker has no run left to take and one run has ended, beside the last
runs (it then holds the tests that failed in every run ended so far; one that a later run reports
failing in every run too gets a second rerun), and the reruns alone as soon as it is recorded: a
hunt of 3 runs on 2 cores takes two runs' time, not four. A run whose
process dies inside a test (a segfault in its threads) names the crash after that test, from the
plugin's progress record, and goes on with the tests that never ran in a new process: a part.

The output folder keeps each run's trial folder (`run-<i>`, its parts `run-<i>-part<k>`, the rerun's
`rerun-1-thread`, a second one `rerun-1-thread-2`, the reruns alone `alone-<k>`) and
`hunt.jsonl` (harness.campaign.hunt.records): a hunt killed mid-run and started again with the
same `-o` reads its finished runs back and runs only the others. Ctrl-C kills the runs in flight
(not recorded: a resume reruns them) and exits 130.

Fix sets (`--fix`, once or several times) work as in stress: run i of every set meets plan seed i,
and the report gives each test's k/n per set.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from harness.args import UsageError
from harness.campaign import backends, bytecode_cache
from harness.campaign.arms import INTERRUPTED_RC, arm_spec
from harness.campaign.hunt.junit import CRASHED, FAILING, JunitTest
from harness.campaign.hunt.options import JUNIT, HuntOptions, options_from_args, pytest_argv
from harness.campaign.hunt.plugin import JUNIT_ENV, ONLY_ENV, PROGRESS_ENV
from harness.campaign.hunt.progress import PROGRESS, crashed_test, process_tests
from harness.campaign.hunt.records import ALONE, ONE_THREAD, RECORDS, RecordLog, RunRecord, TestRecord, read_key
from harness.campaign.hunt.report import print_report
from harness.campaign.hunt.verdicts import always_failing, needs_alone, verdicts
from harness.campaign.loop import WorkLoop
from harness.diagnosis import diagnose
from harness.trial.folder import OUTPUT
from harness.trial.folder import text as folder_text
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.spec import TrialSpec

RERUN_FOLDER = "rerun-1-thread"
ONLY = "only.txt"
"""In a rerun's folder: the tests it runs, one node id a line."""
MAX_PARTS = 20
"""Processes one run may take: each part after a crash runs the tests the crash left unrun."""
PYTEST_BAD_INPUT = {4: "pytest rejected its arguments", 5: "PYTEST_ARGS select no test"}
"""pytest's exit codes for a usage error and for no test collected."""
_RUN_LEVEL = (Outcome.HANG, Outcome.TIMEOUT, Outcome.ABORT)
"""Endings of a run that wrote its report but still ended badly (a hang at exit, a crash)."""


@dataclass(frozen=True, slots=True)
class HuntRun:
    index: int
    """The run's number over all arms; ONE_THREAD for the rerun with one thread, ALONE - k for the k-th alone."""
    arm: int
    seed: int
    """Plan seed: run i of every arm gets seed i."""
    only: tuple[str, ...] = ()
    """The rerun's tests."""
    folder: str = ""
    """Its folder's name, where it is not the index's (a second rerun with one thread)."""


@dataclass(frozen=True, slots=True)
class RunPart:
    """One process of a run: the whole run unless a test crashed it."""

    result: TrialResult
    folder: Path
    tests: tuple[JunitTest, ...] | None
    """From the junit report, or from the progress record where the process died; None: neither."""
    crashed: JunitTest | None = None
    never_ran: tuple[str, ...] = ()
    """Tests after the crashed one, for the next part."""


def run_hunt(a: argparse.Namespace) -> int:
    opts = options_from_args(a)
    backend = backends.from_args(a)
    try:
        if a.workers is None and backend.cpus:
            opts = dataclasses.replace(opts, workers=backend.cpus)
        return _hunt(opts, backend)
    finally:
        backend.close()


def _hunt(opts: HuntOptions, backend: backends.Backend) -> int:
    log = RecordLog(opts.out_dir, opts.key)
    loop = HuntLoop(opts, log, log.load(), backend)
    start = time.monotonic()
    loop.speculate = True
    loop.run(loop.pending())
    loop.speculate = False
    if not loop.interrupted and loop.bad_input is None:
        loop.run(loop.rerun())
    if not loop.interrupted and loop.bad_input is None:
        loop.run(loop.alone())
    if loop.bad_input is not None:
        if opts.own_dir:
            shutil.rmtree(opts.out_dir, ignore_errors=True)
        raise UsageError(loop.bad_input)
    if loop.interrupted:
        print(f"interrupted: finished runs are kept; rerun with -o {opts.out_dir} to resume", file=sys.stderr)
        return INTERRUPTED_RC
    if loop.lost:
        print(
            f"{loop.lost} run(s) lost with their node or worker, not recorded: rerun the same command with "
            f"-o {opts.out_dir} to complete the hunt",
            file=sys.stderr,
        )
    found = verdicts(loop.records, opts.fix_sets)
    return print_report(opts, found, loop.records, time.monotonic() - start)


def report_folder(folder: Path, *, as_json: bool = False) -> int:
    """A hunt's report from its folder alone (`harness diagnose HUNT_FOLDER`): its records read back
    and judged by the same verdicts hunt printed, so a folder never reads two ways."""
    head = read_key(folder)
    if head is None:
        raise UsageError(f"{folder}: not a hunt folder (no readable {RECORDS} header)")
    records = RecordLog(folder, head).load()
    runs = max((r.run for r in records if not r.rerun), default=-1) // max(1, len(head.fix_sets)) + 1
    opts = HuntOptions(
        pytest_args=head.pytest_args,
        runs=runs,
        threads=head.threads,
        workers=1,
        out_dir=folder,
        own_dir=False,
        plan=head.plan,
        fix_sets=head.fix_sets,
        as_json=as_json,
    )
    return print_report(opts, verdicts(records, opts.fix_sets), records, 0.0)


class HuntLoop:
    """The runs of one hunt over the campaign's worker loop; each finished run is recorded at once."""

    def __init__(
        self, opts: HuntOptions, log: RecordLog, records: list[RunRecord], backend: backends.Backend | None = None
    ) -> None:
        self.opts, self.log = opts, log
        self.backend = backend or backends.local()
        self.lost = 0
        """Runs the backend lost (a Ray node died): not recorded, so that the same command reruns them."""
        self.speculate = False
        """Workers with nothing to take may start the rerun with one thread early (`_early_rerun`)."""
        self.early: tuple[str, ...] = ()
        """The tests the early rerun took."""
        self.alone_taken: list[str] = []
        """Tests whose rerun alone this hunt has started (recorded or not yet)."""
        self.records = list(records)
        self.lock = threading.Condition()
        """Guards the queue and the records; notified as each run ends."""
        self.in_flight = 0
        self.queue: deque[HuntRun] = deque()
        self.stop = threading.Event()
        self.loops: list[WorkLoop] = []
        self.bad_input: str | None = None

    @property
    def interrupted(self) -> bool:
        return any(loop.interrupted for loop in self.loops)

    def pending(self) -> list[HuntRun]:
        """The runs no record holds yet, in order: run i of every arm, then run i + 1."""
        done = {r.run for r in self.records}
        arms = len(self.opts.fix_sets)
        runs = [HuntRun(index=i, arm=i % arms, seed=i // arms) for i in range(self.opts.runs * arms)]
        return [r for r in runs if r.index not in done]

    def rerun(self) -> list[HuntRun]:
        """The rerun with one thread of the tests that failed in every run and no such rerun holds
        yet (the early one ran on the runs finished then: a test only a later run reported is left)."""
        covered = {t.id for r in self.records if r.run == ONE_THREAD for t in r.tests or ()}
        ids = [tid for tid in always_failing([r for r in self.records if not r.rerun]) if tid not in covered]
        if not ids:
            return []
        used = {r.folder for r in self.records}
        k = next(k for k in range(len(used) + 1) if _rerun_folder(k) not in used)
        return [HuntRun(index=ONE_THREAD, arm=0, seed=0, only=tuple(ids), folder=_rerun_folder(k))]

    def _early_rerun(self) -> HuntRun | None:
        """With every run started and one finished, a worker that has nothing to take reruns with one
        thread the tests that failed in every finished run, while the last runs go on: a test that
        fails in every run failed in these, and a rerun of one that then passes is not read
        (`hunt_verdicts.verdicts`). Caller holds the lock."""
        main = [r for r in self.records if not r.rerun]
        if self.early or self.queue or not main or any(r.run == ONE_THREAD for r in self.records):
            return None
        ids = tuple(always_failing(main))
        if not ids:
            return None
        self.early = ids
        return HuntRun(index=ONE_THREAD, arm=0, seed=0, only=ids, folder=_rerun_folder(0))

    def alone(self) -> list[HuntRun]:
        """Each test that failed in every run with threads, passed with one and named no race, run
        alone with the same threads (one process each), unless recorded: its own race, or the state
        an earlier test left."""
        started = {t.id for r in self.records if r.alone for t in r.tests or ()} | set(self.alone_taken)
        ids = [v.id for v in verdicts(self.records, self.opts.fix_sets) if needs_alone(v) and v.id not in started]
        return [HuntRun(index=ALONE - k, arm=0, seed=0, only=(tid,)) for k, tid in enumerate(ids, len(started))]

    def _early_alone(self) -> HuntRun | None:
        """Once a rerun with one thread is recorded, a worker with nothing to take starts the reruns
        alone its verdicts ask for (the first; the queue gets the others), beside the last runs: a
        test that a later run passes is then flaky with threads, and its alone run is not read.
        Caller holds the lock."""
        if not any(r.run == ONE_THREAD for r in self.records):
            return None
        runs = self.alone()
        self.alone_taken += [run.only[0] for run in runs]
        self.queue.extend(runs[1:])
        return runs[0] if runs else None

    def run(self, runs: list[HuntRun]) -> None:
        if not runs:
            return
        self.queue.extend(runs)
        loop = WorkLoop(
            "hunt",
            workers=min(self.opts.workers, len(runs)),
            take=self._take,
            work=self._work,
            longest_s=self.opts.timeout_s,
        )
        self.stop = loop.stop
        self.loops.append(loop)
        loop.run()

    def _take(self) -> HuntRun | None:
        """The next run; while runs are in flight a worker with nothing to take waits, for their
        ends may give the early reruns something (a worker that returned would be gone)."""
        with self.lock:
            while not self.stop.is_set():
                run = self.queue.popleft() if self.queue else None
                if run is None and self.speculate:
                    run = self._early_rerun() or self._early_alone()
                if run is not None:
                    self.in_flight += 1
                    return run
                if not (self.speculate and self.in_flight):
                    return None
                self.lock.wait(0.5)
            return None

    def _work(self, run: HuntRun) -> None:
        try:
            self._run_and_record(run)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.lock.notify_all()

    def _run_and_record(self, run: HuntRun) -> None:
        folder = self.opts.out_dir / _folder_name(run)
        try:
            parts = self._run_parts(run, folder)
        except backends.TrialNotRun as e:
            with self.lock:
                self.lost += 1
            print(f"hunt: {_folder_name(run)}: lost, not recorded ({e}); the same command reruns it", file=sys.stderr)
            return
        self._finish(run, parts, folder)

    def _run_parts(self, run: HuntRun, folder: Path) -> list[RunPart]:
        parts: list[RunPart] = []
        only = run.only
        while True:
            where = folder if not parts else folder.with_name(f"{folder.name}-part{len(parts) + 1}")
            where.mkdir(parents=True, exist_ok=True)
            try:
                result = self.backend.run(self._spec(run, where, only), where)
            except backends.TrialNotRun:
                for gone in (*(p.folder for p in parts), where):  # the run is lost whole
                    shutil.rmtree(gone, ignore_errors=True)
                raise
            parts.append(read_part(result, where))
            if not parts[-1].never_ran or self.stop.is_set() or len(parts) >= MAX_PARTS:
                return parts
            only = parts[-1].never_ran

    def _finish(self, run: HuntRun, parts: list[RunPart], folder: Path) -> None:
        record = judge(run, parts, self.opts.out_dir)
        with self.lock:
            if self.interrupted:
                # Killed by our own Ctrl-C: not a run of the suite; a resume runs it again.
                for part in parts:
                    shutil.rmtree(part.folder, ignore_errors=True)
                return
            bad = _bad_input(record, folder)
            if bad is not None:
                self.bad_input = self.bad_input or bad
                self.stop.set()
                return
            self.log.append(record)
            self.records.append(record)
        print(_progress_line(record, self.opts), file=sys.stderr, flush=True)

    def _spec(self, run: HuntRun, folder: Path, only: tuple[str, ...]) -> TrialSpec:
        o = self.opts
        rerun = run.index < 0  # with one thread, or alone: the tests as they are, no plan
        fixes = None if rerun else o.fix_sets[run.arm]
        # The plugin's files are named in the run's own folder, wherever it runs (a Ray node too).
        env = {PROGRESS_ENV: PROGRESS, JUNIT_ENV: JUNIT, **bytecode_cache.run_env(o.bytecode_cache)}
        files = {ONLY: "\n".join(only) + "\n"} if only else {}
        if only:
            env[ONLY_ENV] = ONLY
        argv = pytest_argv(o, 1 if run.index == ONE_THREAD else o.threads)
        plan = None if rerun else o.plan
        # The window counters are not read here: installing none keeps their probes out of
        # every test's compiled calls.
        limits = {"timeout_s": o.timeout_s, "hang_s": o.hang_s}
        return arm_spec("hunt", run.index, run.seed, argv, fixes, plan, **limits, env=env, exposure=False, files=files)


def read_part(result: TrialResult, folder: Path) -> RunPart:
    """A process's tests: its junit report, or where it died, its progress record with the running
    test as crashed."""
    tests, progress = process_tests(folder)
    if progress is None:
        return RunPart(result, folder, tests)
    crashed = crashed_test(progress, f"{result.outcome.name}: {result.signature_summary or result.detail}", "")
    if crashed is None:
        return RunPart(result, folder, tests)
    return RunPart(result, folder, (*progress.done, crashed), crashed, progress.never_ran)


def _rerun_folder(k: int) -> str:
    return RERUN_FOLDER if k == 0 else f"{RERUN_FOLDER}-{k + 1}"


def _folder_name(run: HuntRun) -> str:
    if run.folder:
        return run.folder
    if run.index == ONE_THREAD:
        return RERUN_FOLDER
    return f"alone-{ALONE - run.index}" if run.index <= ALONE else f"run-{run.index}"


def judge(run: HuntRun, parts: list[RunPart], out_dir: Path) -> RunRecord:
    """The run as a record: its tests over its parts, each failure's races from its own text, a
    crashed test's and the run's from the folder of the process that ended outside its report."""
    folder_races = {p.folder: tuple(diagnose.folder_races(p.folder)[0]) for p in parts if _ended_badly(p)}
    tests = [_test_record(t, folder_races.get(p.folder, ())) for p in parts for t in p.tests or ()]
    ending = next((p.result for p in parts if _ended_badly(p)), parts[0].result)
    return RunRecord(
        run=run.index,
        arm=run.arm,
        seed=run.seed,
        outcome=ending.outcome.name,
        rc=ending.rc,
        detail=ending.signature_summary or ending.detail,
        duration_s=round(sum(p.result.duration_s for p in parts), 3),
        folder=str(parts[0].folder.relative_to(out_dir)),
        tests=None if all(p.tests is None for p in parts) else tuple(tests),
        races=tuple(dict.fromkeys(race for races in folder_races.values() for race in races)),
        parts=len(parts),
    )


def _ended_badly(part: RunPart) -> bool:
    return part.tests is None or part.crashed is not None or part.result.outcome in _RUN_LEVEL


def _test_record(t: JunitTest, crash_races: tuple[str, ...]) -> TestRecord:
    if t.outcome == CRASHED:
        races = crash_races
    else:
        races = tuple(failure_races(t.text, t.id)) if t.outcome in FAILING else ()
    return TestRecord(
        id=t.id,
        outcome=t.outcome,
        threads=t.threads,
        single_reason=t.single_reason,
        message=t.message,
        races=races,
        collected=t.collected,
    )


def failure_races(text: str, source: str) -> list[str]:
    """The catalogued races a test's own failure text names, by id."""
    return _race_ids(diagnose.diagnose(diagnose.failures_in_text(text, source=source)))


def _race_ids(findings: list[diagnose.Finding]) -> list[str]:
    """The races findings name, once each in order; a failure that is the program's own names none."""
    return list(dict.fromkeys(f.race for f in findings if f.race is not None and not f.own))


def _bad_input(record: RunRecord, folder: Path) -> str | None:
    """pytest refused the arguments, or they select no test: the user's to fix, not a run."""
    if record.rc not in PYTEST_BAD_INPUT or record.tests:
        return None
    output = folder_text(folder / OUTPUT) or ""
    said = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    return f"{PYTEST_BAD_INPUT[record.rc]} (exit {record.rc}){': ' + said[-1] if said else ''}"


def _progress_line(record: RunRecord, opts: HuntOptions) -> str:
    if record.alone:
        what = f"rerun alone with {opts.threads} threads"
    else:
        what = "rerun with 1 thread" if record.rerun else f"run {record.run + 1}/{opts.runs * len(opts.fix_sets)}"
    tests = record.tests or ()
    failing = sum(t.outcome in FAILING for t in tests)
    crashed = [t.id for t in tests if t.outcome == CRASHED]
    report = f"{len(tests)} tests, {failing} failing" if record.tests is not None else "no junit report"
    if crashed:
        report += f"; the process died in {', '.join(crashed)}"
    if record.parts > 1:
        report += f"; went on in {record.parts} processes"
    return f"hunt: {what}: {_ending(record)} in {record.duration_s:.1f}s, {report}"


def _ending(record: RunRecord) -> str:
    """How the run ended, in pytest's words where pytest reported: its exit 1 is tests that
    failed, not a crash of the process (CRASH is the runner's name for any non-zero exit)."""
    if record.tests is not None and record.outcome in ("CRASH", "OK") and record.rc in (0, 1):
        return "tests failed (pytest exit 1)" if record.rc == 1 else "passed (pytest exit 0)"
    return record.outcome
