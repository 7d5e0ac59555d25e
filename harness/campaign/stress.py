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
import collections
import functools
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.args import UsageError
from harness.campaign import backends, bytecode_cache
from harness.campaign.arms import INTERRUPTED_RC, arm_spec
from harness.campaign.calibration import plan_summary
from harness.campaign.expand import plan_json
from harness.campaign.loop import WorkLoop
from harness.campaign.matrix_progress import format_elapsed
from harness.campaign.matrix_spec import PlanChoice
from harness.diagnosis import diagnose, probes
from harness.diagnosis.side_by_side import ArmCount, StressRecord, arm_name
from harness.diagnosis.trial_failures import recorded_config_sets
from harness.text import clip
from harness.trial import native, tracebacks
from harness.trial.folder import NATIVE_STACK, OUTPUT
from harness.trial.folder import text as folder_text
from harness.trial.interpreter import interpreter_versions
from harness.trial.outcome import HARNESS_DEFECT, SHOWN_AT_EXIT_0, Outcome, TrialResult
from harness.trial.spec import CHILDREN_ENV, TrialSpec

EXCERPT_FRAMES = 3
"""Innermost frames of a failure's traceback echoed with its exception line."""
EXCERPT_LINES = 4
"""Last lines of a failing run's output echoed where it printed no traceback."""
EXCERPT_WIDTH = 200
DETERMINISTIC_RUNS = 3
DETERMINISTIC_FAST_S = 30.0
"""A failure in each of the first DETERMINISTIC_RUNS runs, each shorter than this, the same way."""
DEFAULT_HANG_S = 60.0
"""Idle this long (no CPU, no output, the same stacks) and a run is a HANG (trial.runner)."""
_BARE_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


@dataclass(kw_only=True, slots=True)
class StressOptions:
    cmd: tuple[str, ...]
    parallel: int
    timeout_s: float
    hang_s: float
    max_runs: int | None = None
    max_fails: int | None = None
    max_time_s: float | None = None
    failure: re.Pattern | None = None
    ignore: re.Pattern | None = None
    plan: str | None = None
    python: str | None = None
    """Interpreter that replaces CMD's own `python` (TrialSpec.python)."""
    out_dir: Path
    own_dir: bool = False
    """out_dir is a temp folder of ours: removed at the end when no run failed."""
    interval_s: float = 5.0
    fix_sets: tuple[tuple[str, ...] | None, ...] = (None,)
    """One arm per set: None runs CMD as it is; a tuple (possibly empty: `none`) is the fixes the bootstrap applies (TrialSpec.fixes)."""
    keep_going: bool = False
    """Run on after a deterministic failure."""
    python_note: str = ""
    """What `python` in CMD runs, for the first line."""
    bytecode_cache: Path | None = None
    """Where runs load and write Python bytecode (PYTHONPYCACHEPREFIX), writing allowed."""
    children: bool = False
    """The plan and the fixes reach the Python processes the program starts (the bootstrap)."""


def options_from_args(a: argparse.Namespace) -> StressOptions:
    cmd, python = _command(a)
    _check_numbers(a)
    fix_sets = tuple(getattr(a, "fix_sets", None) or (None,))
    _check_python_options(a, cmd, python, fix_sets)
    cache = bytecode_cache.folder(getattr(a, "bytecode_cache", None))
    return StressOptions(
        cmd=tuple(cmd),
        parallel=a.parallel or 1,
        timeout_s=a.timeout,
        hang_s=a.hang or min(a.timeout, DEFAULT_HANG_S),
        max_runs=a.max_runs,
        max_fails=a.max_fails,
        max_time_s=a.max_time,
        failure=_regexp(a.failure, "--failure"),
        ignore=_regexp(a.ignore, "--ignore"),
        plan=a.plan,
        python=python,
        out_dir=Path(a.output) if a.output else Path(tempfile.mkdtemp(prefix="harness-stress-")),
        own_dir=not a.output,
        interval_s=a.interval,
        fix_sets=fix_sets,
        keep_going=bool(getattr(a, "keep_going", False)),
        python_note=_python_note(cmd[0], python, given=getattr(a, "python", None) is not None, cache=cache),
        bytecode_cache=cache,
        children=bool(getattr(a, "children", False)),
    )


def _command(a: argparse.Namespace) -> tuple[list[str], str | None]:
    """CMD after `--`, and the interpreter that runs its `python` (a bare `python`: ours)."""
    cmd = list(a.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("stress needs a command: python -m harness stress [options] -- CMD ...")
    python = getattr(a, "python", None)
    bare = "/" not in cmd[0] and _BARE_PYTHON.fullmatch(cmd[0]) is not None
    if python is None and bare:
        python = sys.executable
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).is_file() and not bare:
        raise UsageError(f"program {cmd[0]!r} not found")
    if Path(cmd[0]).name.startswith("python"):
        _check_script(cmd[1:])
    return cmd, python


_VALUE_OPTIONS = ("-W", "-X", "-Q")
"""The interpreter's options that take the next argument as their value."""


def _check_script(args: list[str]) -> None:
    """A Python CMD's script must exist: a missing one is bad input, not the program's failure
    (every run would exit 2 with `can't open file`). `-c`, `-m` and stdin name no file to check."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or arg[:2] in ("-c", "-m"):
            return
        if arg in _VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        path = Path(arg)
        if not path.is_file() and not (path / "__main__.py").is_file():
            raise UsageError(f"program file {arg!r} not found (from {os.getcwd()})")
        return


def _check_numbers(a: argparse.Namespace) -> None:
    for name in ("parallel", "max_runs", "max_fails"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("timeout", "hang", "max_time", "interval"):
        if getattr(a, name) is not None and not getattr(a, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be > 0")


def _check_python_options(a: argparse.Namespace, cmd: list[str], python: str | None, fix_sets: tuple) -> None:
    """--plan names a profile; --python and --fix need a Python CMD (and --python an interpreter)."""
    if a.plan is not None:
        plan_json(PlanChoice(name=a.plan, profile=a.plan), 0)  # unknown profile -> MatrixError (bad input too)
    is_python = Path(cmd[0]).name.startswith("python")
    if python is not None and not is_python:
        raise UsageError(f"--python: CMD starts with {cmd[0]!r}, not a Python interpreter to replace")
    if python is not None and not Path(python).is_file():
        raise UsageError(f"--python: no interpreter at {python}")
    if any(f is not None for f in fix_sets) and not is_python:
        raise UsageError(f"--fix: CMD starts with {cmd[0]!r}; fixes go into a Python program (python ...)")


def _python_note(program: str, python: str | None, *, given: bool, cache: Path | None = None) -> str:
    """What `python` in CMD runs, for the first line; '' where CMD runs no interpreter of ours."""
    if python is None:
        return ""
    how = "--python" if given else "the harness's own interpreter; --python PATH for another"
    note = f"`{program}` in CMD runs {python} (torch {interpreter_versions(python)[0] or 'not installed'}; {how})"
    return note + (f"; bytecode cached in {cache}" if cache is not None else _bytecode_note(python))


def _bytecode_note(python: str) -> str:
    """Where every run compiles torch's modules again: seconds a run that would pass for the harness's own."""
    try:
        facts, _ = probes.run_script(probes.script("python"), python=python, timeout_s=60)
    except probes.ProbeFailed:
        return ""  # no torch there: the runs say so themselves
    if not facts.get("torch_compiled_from_source"):
        return ""
    return (
        "; every run compiles torch's modules first, with no bytecode cached or written (`harness doctor`;"
        " --bytecode-cache DIR keeps it)"
    )


def _regexp(text: str | None, flag: str) -> re.Pattern | None:
    if text is None:
        return None
    try:
        return re.compile(text, re.M)
    except re.error as e:
        raise UsageError(f"{flag}: bad regexp {text!r}: {e}") from None


@dataclass(kw_only=True, slots=True)
class StressState:
    runs: int = 0
    failures: int = 0
    started: int = 0
    durations: list[float] = field(default_factory=list)
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    signatures: collections.Counter = field(default_factory=collections.Counter)
    findings: collections.Counter = field(default_factory=collections.Counter)
    """Runs that exited OK but showed a race's face (a recompile limit hit, eager fallback); each
    such run also counts as a failure, unless the face is only suspected."""
    races: collections.Counter = field(default_factory=collections.Counter)
    """Failing runs per race the diagnosis named (`unknown` where none)."""
    plan_hits: int = 0
    """Points of the fault plan the runs reached (the plan log's summary), over all runs."""
    plan_logs: int = 0
    """Runs whose plan log had its closing summary (a run killed before exit writes none)."""

    def line(self, elapsed_s: float) -> str:
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        return f"{format_elapsed(elapsed_s)}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%)"


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


def explain(out_dir: Path) -> str:
    """The failing runs' diagnosis, `harness diagnose OUT_DIR` brief (the same function, reading the
    same folder and its stress record), or why there is none."""
    try:
        return diagnose.report([str(out_dir)], brief=True)[0]
    except diagnose.DiagnoseError as e:
        return f"diagnosis: none ({e})"


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
        self.arms = [StressState() for _ in opts.fix_sets]
        self.state = StressState()
        self.lock = threading.Lock()
        o = opts
        workers = o.parallel if o.max_runs is None else min(o.parallel, o.max_runs * len(self.arms))
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
        self.defects = 0
        """Runs the harness's own code failed (never the program's failures; kept and named)."""
        self.lost = 0
        """Runs the backend lost (a Ray node died): not counted, said."""
        self.deterministic = ""
        self.first: dict[int, _Judged] = {}
        self.start = time.monotonic()
        self.next_line = self.start + opts.interval_s

    @property
    def interrupted(self) -> bool:
        return self.loop.interrupted

    def _take(self) -> _Run | None:
        o, s = self.opts, self.state
        with self.lock:
            over_time = o.max_time_s is not None and time.monotonic() - self.start >= o.max_time_s
            per_arm = s.started // len(self.arms)
            if (
                self.stop.is_set()
                or over_time
                or (o.max_runs is not None and per_arm >= o.max_runs)
                or (o.max_fails is not None and max(a.failures for a in self.arms) >= o.max_fails)
            ):
                return None
            s.started += 1
            i = s.started - 1
            return _Run(index=i, arm=i % len(self.arms), seed=i // len(self.arms))

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
                self.lost += 1
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
                self.defects += 1
                print(
                    f"\n--- run {run.index}{self._arm_tag(run)}: {result.detail}; artefacts: {j.folder}",
                    file=sys.stderr,
                )
                return
            sig = result.signature_summary or result.detail or result.outcome.name
            for s in (self.state, self.arms[run.arm]):
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
            if j.failed and self.state.signatures[sig] == 1:
                # The first run of each way of failing; the report counts them all.
                self._echo(run, j)
            self._check_deterministic(run, j)
        if not j.failed and not j.faces:
            shutil.rmtree(j.folder, ignore_errors=True)

    def _echo(self, run: _Run, j: _Judged) -> None:
        """The run's ending and one short excerpt: its native crash site, else its failure's
        exception and innermost frames, else its output's last lines."""
        what = f"{j.result.outcome.name} {j.result.detail}"
        excerpt = _native_lines(j.folder) or _excerpt(folder_text(j.folder / OUTPUT) or "")
        print(
            f"\n--- run {run.index}{self._arm_tag(run)}: {what}; artefacts: {j.folder}",
            *excerpt,
            sep="\n",
            file=sys.stderr,
            flush=True,
        )

    def _arm_tag(self, run: _Run) -> str:
        return f" [{arm_name(self.opts.fix_sets[run.arm])}]" if len(self.arms) > 1 else ""

    def _check_deterministic(self, run: _Run, j: _Judged) -> None:
        """Each of the first DETERMINISTIC_RUNS runs failed the same way (outcome, signature and
        every failure of the run, in any thread), fast: a deterministic failure, not a race. A
        catalogued race keeps it going, unless the program started no thread of its own (then the
        message is the program's own doing). Caller holds the lock."""
        if self.opts.keep_going or run.index >= DETERMINISTIC_RUNS or len(self.arms) > 1:
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
            self.deterministic = (
                f"your program fails this way on its own, not by a race: it started no thread, and each "
                f"of the first {DETERMINISTIC_RUNS} runs failed the same way ({how}) {took}, though the "
                f"message is {', '.join(shown)}'s; stopped"
            )
        else:
            self.deterministic = (
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
                print(self.state.line(time.monotonic() - self.start), file=sys.stderr, flush=True)

    def report(self) -> int:
        s = self.state
        self._print_totals(time.monotonic() - self.start)
        self._print_groups()
        if s.failures or s.findings or self.defects:
            self._stress_record().write(self.opts.out_dir)
            print(explain(self.opts.out_dir))
            out = self.opts.out_dir
            print(
                f"{'failing' if s.failures else 'kept'} runs' artefacts: {out} (each run's whole output: {out}/<run>/{OUTPUT})"
            )
        elif self.opts.own_dir:
            shutil.rmtree(self.opts.out_dir, ignore_errors=True)
        return 1 if s.failures else 0

    def _stress_record(self) -> StressRecord:
        """What the folder keeps beside its runs for a later `diagnose FOLDER` (side_by_side)."""
        o = self.opts
        options = (("--plan", o.plan) if o.plan else ()) + (("--children",) if o.children else ())
        arms = tuple(
            ArmCount(fixes=fixes, failed=a.failures, runs=a.runs, races=dict(a.races))
            for fixes, a in zip(o.fix_sets, self.arms)
        )
        return StressRecord(command=o.cmd, options=options, arms=arms, deterministic=self.deterministic)

    def _print_totals(self, elapsed: float) -> None:
        """The stop's verdict, the totals (or the fix sets' table) and the run times."""
        s = self.state
        if self.deterministic:
            print(self.deterministic)
        idle_plan = self._idle_plan()
        print(self._arm_table(elapsed) if len(self.arms) > 1 else self._total_line(elapsed, idle_plan))
        if idle_plan:
            print(idle_plan)
        if s.durations:
            print(
                f"run time: min {min(s.durations):.2f}s, median {stats.median_or_none(s.durations):.2f}s, "
                f"max {max(s.durations):.2f}s; outcomes: " + " ".join(f"{k}:{v}" for k, v in sorted(s.outcomes.items()))
            )

    def _print_groups(self) -> None:
        """Each distinct failure once with its count, each race face of an OK run, harness defects."""
        s = self.state
        for sig, count in s.signatures.most_common():
            print(f"  {count} x {sig}")
        for face, count in s.findings.most_common():
            print(f"  {count} run(s) exited OK but showed {face}")
        if self.lost:
            print(f"  {self.lost} run(s) lost with their node or worker (not counted)")
        if self.defects:
            print(
                f"  {self.defects} run(s) failed in the harness's own code (a harness defect, not counted): please report"
            )

    def _total_line(self, elapsed: float, idle_plan: str) -> str:
        s = self.state
        ci = stats.wilson(s.failures, s.runs)
        # A bound says how rare the failure is under the plan; a race the runs showed needs none.
        bound = ""
        if s.runs and not s.failures:
            bound = (
                f"; p < {100 * stats.rule_of_three(s.runs):.2f}% (rule of three{', plain runs' if idle_plan else ''})"
            )
        races = f"; races: {_races_text(s.races)}" if s.failures and not self.deterministic else ""
        return (
            f"{s.runs} runs completed, {s.failures} failures ({100 * s.failures / max(1, s.runs):.2f}%), over "
            f"{format_elapsed(elapsed)}; Wilson 95% [{100 * ci.low:.2f}%, {100 * ci.high:.2f}%]{bound}{races}"
        )

    def _idle_plan(self) -> str:
        """A plan whose points no run reached, and that sets no switch interval, did nothing."""
        o, s = self.opts, self.state
        if not o.plan or not s.plan_logs or s.plan_hits:
            return ""
        if plan_json(PlanChoice(name=o.plan, profile=o.plan), 0).get("switch_interval") is not None:
            return ""
        return (
            f"the plan did nothing here: no run reached any of {o.plan}'s points (torch functions the "
            "program never called); these were plain runs. --plan switch perturbs any Python threads"
        )

    def _arm_table(self, elapsed: float) -> str:
        """One row per fix set: failures k/n (a run that showed a race counts, whatever its exit
        code), Wilson 95%, median run time and its ratio to the first, and the races it showed."""
        rows = [f"{'fixes':<32} {'failed':>9} {'Wilson 95%':>17} {'median run':>11} {'vs first':>9}  races"]
        base = stats.median_or_none(self.arms[0].durations)
        for fixes, a in zip(self.opts.fix_sets, self.arms):
            ci = stats.wilson(a.failures, a.runs)
            med = stats.median_or_none(a.durations)
            ratio = f"{med / base:.2f}x" if med and base else "-"
            rows.append(
                f"{arm_name(fixes):<32} {f'{a.failures}/{a.runs}':>9} "
                f"{f'[{100 * ci.low:.1f}%, {100 * ci.high:.1f}%]':>17} "
                f"{f'{med:.2f}s' if med is not None else '-':>11} {ratio:>9}  {_races_text(a.races) or '-'}"
            )
        return (
            f"{self.state.runs} runs over {format_elapsed(elapsed)}; run i of every set had plan seed i\n"
            + "\n".join(rows)
        )


def _races_text(races: collections.Counter) -> str:
    return ", ".join(f"{race} {n}" for race, n in races.most_common())


def _native_lines(folder: Path, frames: int = EXCERPT_FRAMES) -> list[str]:
    """The crash site and innermost native frames the runner kept (harness.trial.native); [] where
    it kept none (no native crash)."""
    path = folder / NATIVE_STACK
    if not path.is_file():
        return []
    site, shown = native.kept_summary(path.read_text(errors="replace"), frames)
    return [f"native crash site: {site}"] + [f"  {line}" for line in shown.splitlines()]


def _excerpt(output: str) -> list[str]:
    """A failing run in a few lines: its first failure's exception and innermost frames (the
    thread that raised it), else the output's last lines."""
    tb = tracebacks.primary_traceback(tracebacks.parse_tracebacks(output))
    if tb is None:
        tail = [line for line in output.splitlines() if line.strip()][-EXCERPT_LINES:]
        return [clip(line, EXCERPT_WIDTH) for line in tail]
    thread = f" (thread {tb.thread})" if tb.thread else ""
    head = clip(" ".join(f"{tb.exc_type}: {tb.message}".split()) + thread, EXCERPT_WIDTH)
    return [head] + [clip(f"  at {frame}", EXCERPT_WIDTH) for frame in tb.frames[:EXCERPT_FRAMES]]
