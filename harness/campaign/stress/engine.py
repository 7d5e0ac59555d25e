"""`python -m harness stress [options] -- CMD ...`: Go's stress for users' own programs.

Runs CMD over and over, `-p` at a time, each run through `runner.run_trial` (own session, output to
a file, deadline, stack dump on hang), and prints every `--interval` seconds
`<elapsed>: N runs so far, M failures (x.xx%)` (golang.org/x/tools/cmd/stress). A failing run's
folder is kept (its whole output in `<run>/output.txt`); the first run of each distinct failure
(signature) is echoed as one short excerpt, and the report counts each; passing runs' folders are
removed. Stop
rules from the CockroachDB fork: --max-runs, --max-fails, --max-time; without any, it runs until
Ctrl-C. `--plan PROFILE` runs a Python CMD under the seeded scheduler (run i gets seed i), which
is how a user's own threads get the perturbation our matrices use.

A failure is any ending other than OK (TIMEOUT included, as in Go); `--failure RE` counts a
failing run only if its output matches RE, `--ignore RE` drops failing runs whose output matches.
A thread's uncaught exception fails a run that exits 0 (harness.trial.runner).

Noise is named as noise: when each of the first DETERMINISTIC_RUNS runs fails the same way, fast,
in the main thread and as no catalogued race (the command's `known` callback says), the command
fails deterministically and stress stops and says so (`--keep-going` runs on). Runs cut short by
Ctrl-C are neither counted nor kept. A bare `python` in CMD is the harness's own interpreter
(or `--python`'s): a user's PATH may hold another without torch; the first line says which.

Fix sets (`--fix`, given once or several times): each run of a set carries them as its spec's
fixes, which the runner hands to the trial bootstrap, which applies them to the unmodified
program (harness.inject). Several sets are compared
side by side: run i of every set meets plan seed i, sets alternate, and the report is one table
with k/n, the Wilson interval and the median run time per set.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.campaign import backends, bytecode_cache
from harness.campaign.arms import INTERRUPTED_RC, arm_spec
from harness.campaign.calibration import plan_summary
from harness.campaign.loop import WorkLoop
from harness.campaign.stress.options import StressOptions, options_from_args
from harness.campaign.stress.report import (
    Counts,
    StressReport,
    StressState,
    excerpt,
    native_lines,
)
from harness.diagnosis import diagnose
from harness.diagnosis.side_by_side import arm_name
from harness.diagnosis.trial_failures import recorded_config_sets
from harness.trial.folder import OUTPUT
from harness.trial.folder import text as folder_text
from harness.trial.outcome import HARNESS_DEFECT, SHOWN_AT_EXIT_0, Outcome, TrialResult
from harness.trial.spec import CHILDREN_ENV, TrialSpec

DETERMINISTIC_RUNS = 3
DETERMINISTIC_FAST_S = 30.0
"""A failure in each of the first DETERMINISTIC_RUNS runs, each shorter than this, the same way."""


def counts_as_failure(result: TrialResult, output: str, opts: StressOptions) -> bool:
    return result.outcome is not Outcome.OK and passes_filters(output, opts.failure, opts.ignore)


def passes_filters(output: str, failure: re.Pattern | None, ignore: re.Pattern | None) -> bool:
    """A failing run's output as `--failure` and `--ignore` let it count."""
    if failure is not None and not failure.search(output):
        return False
    return not (ignore is not None and ignore.search(output))


SUSPECTED = ", suspected"


def run_faces(output: str, folder: Path) -> list[str]:
    """The race faces a run's output shows (`F10 (recompile limit)`; `..., suspected` where the face
    only suggests the race), read with the configs the program set (F14's precondition)."""
    return diagnose.faces(output, config=recorded_config_sets(folder))


def judge_faces(result: TrialResult, folder: Path, *, failure: re.Pattern | None, ignore: re.Pattern | None) -> None:
    """The runner's `judge` for stress: a run that exits OK but shows a race's face (a message logged
    and carried on) failed, for the race happened. Made before the run's record is written, so that
    every reader of the folder (diagnose, the corpus) reads the same verdict."""
    if result.outcome is not Outcome.OK:
        return
    output = folder_text(folder / OUTPUT) or ""
    shown = [f for f in run_faces(output, folder) if not f.endswith(SUSPECTED)]
    if shown and passes_filters(output, failure, ignore):
        result.outcome, result.detail = Outcome.CRASH, SHOWN_AT_EXIT_0 + ", ".join(shown)
        result.signature_summary = result.signature_summary or result.detail


def run_stress(a: argparse.Namespace) -> int:
    """Run CMD until a stop rule; the diagnosis then says what the failing runs were (it reads the
    folder's stress record: the stop's verdict, the fix sets' counts) before the artefacts' folder
    is named. Exits 130 after Ctrl-C."""
    opts = options_from_args(a)
    backend = backends.from_args(a)
    try:
        if a.parallel is None:
            opts.parallel = backend.cpus or os.cpu_count() or 1
        if opts.python_note:
            print(f"stress: {opts.python_note}", file=sys.stderr, flush=True)
        loop = _StressLoop(opts, backend)
        loop.run()
        rc = loop.report()
    finally:
        backend.close()
    return INTERRUPTED_RC if loop.interrupted else rc


def plan_hits(folder: Path) -> int | None:
    """Points the run's plan reached, from the plan log's closing summary; None where it wrote none."""
    summary = plan_summary(folder)
    hits = summary.get("hits") if summary is not None else None
    return sum(v for v in hits.values() if isinstance(v, int)) if isinstance(hits, dict) else None


def _harness_defect(r: TrialResult) -> bool:
    return r.outcome is Outcome.HARNESS_ERROR and r.detail.startswith(HARNESS_DEFECT)


def _failure_key(r: TrialResult) -> tuple:
    """What "the same way" compares: the ending, its signature and every failure of the run."""
    keys = tuple(sorted(str(f.get("key")) for f in r.failures or () if isinstance(f, dict)))
    return r.outcome, r.signature, keys, r.rc if r.signature is None else None


@dataclass(frozen=True, slots=True)
class _Judged:
    result: TrialResult
    folder: Path
    failed: bool
    faces: list[str]
    races: list[str]
    plan_hits: int | None
    own: list[str] = field(default_factory=list)
    """Races whose message the run showed, though the diagnosis found it the program's own doing."""


@dataclass(frozen=True, slots=True)
class _Run:
    index: int
    """The run's number over all arms (its folder's name)."""
    arm: int
    seed: int
    """Plan seed: run i of every arm gets seed i."""


class _StressLoop:
    def __init__(self, opts: StressOptions, backend: backends.Backend | None = None) -> None:
        self.opts = opts
        self.backend = backend or backends.local()
        self.judge = functools.partial(judge_faces, failure=opts.failure, ignore=opts.ignore)
        self.counts = Counts(state=StressState(), arms=[StressState() for _ in opts.fix_sets])
        self.lock = threading.Lock()
        o = opts
        workers = o.parallel if o.max_runs is None else min(o.parallel, o.max_runs * len(self.counts.arms))
        self.loop = WorkLoop(
            "stress",
            workers=workers,
            take=self._take,
            work=self._work,
            longest_s=o.timeout_s,
            tick=self._tick,
            kill_running=self.backend.kill_running,
            on_interrupt="not counted",
        )
        self.stop = self.loop.stop
        self.first: dict[int, _Judged] = {}
        self.start = time.monotonic()
        self.next_line = self.start + opts.interval_s

    @property
    def interrupted(self) -> bool:
        return self.loop.interrupted

    def _take(self) -> _Run | None:
        o, s = self.opts, self.counts.state
        with self.lock:
            over_time = o.max_time_s is not None and time.monotonic() - self.start >= o.max_time_s
            per_arm = s.started // len(self.counts.arms)
            if (
                self.stop.is_set()
                or over_time
                or (o.max_runs is not None and per_arm >= o.max_runs)
                or (o.max_fails is not None and max(a.failures for a in self.counts.arms) >= o.max_fails)
            ):
                return None
            s.started += 1
            i = s.started - 1
            return _Run(index=i, arm=i % len(self.counts.arms), seed=i // len(self.counts.arms))

    def _spec(self, run: _Run) -> TrialSpec:
        o = self.opts
        fixes = o.fix_sets[run.arm]
        limits = {"timeout_s": o.timeout_s, "hang_s": o.hang_s}
        env = bytecode_cache.run_env(o.bytecode_cache) | ({CHILDREN_ENV: "1"} if o.children else {})
        return arm_spec("stress", run.index, run.seed, o.cmd, fixes, o.plan, **limits, env=env, python=o.python)

    def _work(self, run: _Run) -> None:
        folder = self.opts.out_dir / str(run.index)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            result = self.backend.run(self._spec(run), folder, judge=self.judge)
        except backends.TrialNotRun as e:
            with self.lock:
                self.counts.lost += 1
            shutil.rmtree(folder, ignore_errors=True)
            print(f"\n--- run {run.index}{self._arm_tag(run)}: lost, not counted ({e})", file=sys.stderr, flush=True)
            return
        output = folder_text(folder / OUTPUT) or ""
        self._record(run, self._judge(result, output, folder))

    def _judge(self, result: TrialResult, output: str, folder: Path) -> _Judged:
        """Whether a run failed and which races it showed, from its record (`judge_faces` made the
        verdict of an OK run that showed a race before the record was written)."""
        # A harness defect (a fix's wrapper raised) is ours, not the program's: kept, never counted.
        failed = counts_as_failure(result, output, self.opts) and not _harness_defect(result)
        shown_at_0 = result.detail.startswith(SHOWN_AT_EXIT_0)
        faces = run_faces(output, folder) if not failed or shown_at_0 else []
        races, own = [f.split(" ", 1)[0] for f in faces if not f.endswith(SUSPECTED)], []
        if failed and not shown_at_0:
            races, own = diagnose.folder_races(folder)
        hits = plan_hits(folder) if self.opts.plan else None
        return _Judged(result, folder, failed, [] if failed else faces, races, hits, own)

    def _record(self, run: _Run, j: _Judged) -> None:
        result = j.result
        with self.lock:
            if self.interrupted:
                # Killed by our own Ctrl-C: not a run of the program, not kept.
                shutil.rmtree(j.folder, ignore_errors=True)
                return
            if _harness_defect(result):
                # Not a run of the program: neither counted nor removed.
                self.counts.defects += 1
                print(
                    f"\n--- run {run.index}{self._arm_tag(run)}: {result.detail}; artefacts: {j.folder}",
                    file=sys.stderr,
                )
                return
            sig = result.signature_summary or result.detail or result.outcome.name
            for s in (self.counts.state, self.counts.arms[run.arm]):
                s.runs += 1
                s.failures += j.failed
                s.durations.append(result.duration_s)
                s.outcomes[result.outcome.name] += 1
                s.plan_hits += j.plan_hits or 0
                s.plan_logs += j.plan_hits is not None
                if j.failed:
                    s.signatures[sig] += 1
                    s.races.update(set(j.races) or {"unknown"})
                for face in j.faces if not j.failed else ():  # a failed run's faces are its races
                    s.findings[face] += 1
            if j.failed and self.counts.state.signatures[sig] == 1:
                # The first run of each way of failing; the report counts them all.
                self._echo(run, j)
            self._check_deterministic(run, j)
        if not j.failed and not j.faces:
            shutil.rmtree(j.folder, ignore_errors=True)

    def _echo(self, run: _Run, j: _Judged) -> None:
        """The run's ending and one short excerpt: its native crash site, else its failure's
        exception and innermost frames, else its output's last lines."""
        what = f"{j.result.outcome.name} {j.result.detail}"
        shown = native_lines(j.folder) or excerpt(folder_text(j.folder / OUTPUT) or "")
        print(
            f"\n--- run {run.index}{self._arm_tag(run)}: {what}; artefacts: {j.folder}",
            *shown,
            sep="\n",
            file=sys.stderr,
            flush=True,
        )

    def _arm_tag(self, run: _Run) -> str:
        return f" [{arm_name(self.opts.fix_sets[run.arm])}]" if len(self.counts.arms) > 1 else ""

    def _check_deterministic(self, run: _Run, j: _Judged) -> None:
        """Each of the first DETERMINISTIC_RUNS runs failed the same way (outcome, signature and
        every failure of the run, in any thread), fast: a deterministic failure, not a race. A
        catalogued race keeps it going, unless the program started no thread of its own (then the
        message is the program's own doing). Caller holds the lock."""
        if self.opts.keep_going or run.index >= DETERMINISTIC_RUNS or len(self.counts.arms) > 1:
            return
        self.first[run.index] = j
        if len(self.first) < DETERMINISTIC_RUNS:
            return
        judged = list(self.first.values())
        results = [x.result for x in judged]
        alone = all(r.threads_started == 0 for r in results)
        if (
            not all(x.failed for x in judged)
            or len({_failure_key(r) for r in results}) != 1
            or any(r.duration_s >= DETERMINISTIC_FAST_S for r in results)
            or (any(x.races for x in judged) and not alone)
        ):
            return
        r = results[0]
        how = f"{r.outcome.name}: {r.signature_summary or r.detail}"
        took = f"within {max(x.duration_s for x in results):.1f} s"
        shown = sorted({race for x in judged for race in x.races + x.own})
        if shown and alone:
            self.counts.deterministic = (
                f"your program fails this way on its own, not by a race: it started no thread, and each "
                f"of the first {DETERMINISTIC_RUNS} runs failed the same way ({how}) {took}, though the "
                f"message is {', '.join(shown)}'s; stopped"
            )
        else:
            self.counts.deterministic = (
                f"a deterministic failure, not a race: each of the first {DETERMINISTIC_RUNS} runs failed "
                f"the same way ({how}) {took}, and no catalogued race matches it; stopped "
                "(--keep-going runs on)"
            )
        self.stop.set()

    def run(self) -> None:
        # Ctrl-C is a flag (loop.sigint_as_flag), read under the lock, so a run that ends of our
        # kill is never counted or kept. Like Go's stress, the summary still prints.
        self.loop.run()

    def _tick(self) -> None:
        if time.monotonic() >= self.next_line:
            self.next_line += self.opts.interval_s
            with self.lock:
                print(self.counts.state.line(time.monotonic() - self.start), file=sys.stderr, flush=True)

    def report(self) -> int:
        return StressReport(self.opts, self.counts, time.monotonic() - self.start).print()
