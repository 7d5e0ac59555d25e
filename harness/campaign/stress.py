"""`python -m harness stress [options] -- CMD ...`: Go's stress for users' own programs.

Runs CMD over and over, `-p` at a time, each run through `runner.run_trial` (own session, output to
a file, deadline, stack dump on hang), and prints every `--interval` seconds
`<elapsed>: N runs so far, M failures (x.xx%)` (golang.org/x/tools/cmd/stress). A failing run's
folder is kept and the first 2 KiB of its output echoed; passing runs' folders are removed. Stop
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

Fix sets (`--fix`, given once or several times): each run of a set gets `HARNESS_FIXES`, which the
trial bootstrap applies to the unmodified program (harness.inject). Several sets are compared
side by side: run i of every set meets plan seed i, sets alternate, and the report is one table
with k/n, the Wilson interval and the median run time per set.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.campaign.expand import plan_json
from harness.campaign.pool import JOIN_MARGIN_S, kill_child_groups
from harness.campaign.progress import format_elapsed
from harness.campaign.spec import MatrixError, PlanChoice
from harness.trial import native
from harness.trial.folder import NATIVE_STACK, OUTPUT
from harness.trial.folder import text as folder_text
from harness.trial.interpreter import interpreter_versions
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

ECHO_BYTES = 2048
"""Bytes of a failing run's output echoed to the terminal (Go stress: 2 KiB)."""
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
    """One arm per set: None runs CMD as it is; a tuple (possibly empty: `none`) sets HARNESS_FIXES."""
    keep_going: bool = False
    """Run on after a deterministic failure."""
    python_note: str = ""
    """What `python` in CMD runs, for the first line."""


def options_from_args(a: argparse.Namespace) -> StressOptions:
    cmd = list(a.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise MatrixError("stress needs a command: python -m harness stress [options] -- CMD ...")
    python = getattr(a, "python", None)
    bare = "/" not in cmd[0] and _BARE_PYTHON.fullmatch(cmd[0]) is not None
    if python is None and bare:
        python = sys.executable
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).is_file() and not bare:
        raise MatrixError(f"program {cmd[0]!r} not found")
    for name in ("parallel", "max_runs", "max_fails"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise MatrixError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("timeout", "hang", "max_time", "interval"):
        if getattr(a, name) is not None and not getattr(a, name) > 0:
            raise MatrixError(f"--{name.replace('_', '-')} must be > 0")
    if a.plan is not None:
        plan_json(PlanChoice(name=a.plan, profile=a.plan), 0)  # unknown profile -> MatrixError
    if python is not None and not Path(cmd[0]).name.startswith("python"):
        raise MatrixError(f"--python: CMD starts with {cmd[0]!r}, not a Python interpreter to replace")
    if python is not None and not Path(python).is_file():
        raise MatrixError(f"--python: no interpreter at {python}")
    fix_sets = tuple(getattr(a, "fix_sets", None) or (None,))
    if any(f is not None for f in fix_sets) and not Path(cmd[0]).name.startswith("python"):
        raise MatrixError(f"--fix: CMD starts with {cmd[0]!r}; fixes go into a Python program (python ...)")
    note = ""
    if python is not None:
        how = "--python" if getattr(a, "python", None) else "the harness's own interpreter; --python PATH for another"
        note = f"`{cmd[0]}` in CMD runs {python} (torch {interpreter_versions(python)[0] or 'not installed'}; {how})"
    return StressOptions(
        cmd=tuple(cmd),
        parallel=a.parallel,
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
        python_note=note,
    )


def _regexp(text: str | None, flag: str) -> re.Pattern | None:
    if text is None:
        return None
    try:
        return re.compile(text, re.M)
    except re.error as e:
        raise MatrixError(f"{flag}: bad regexp {text!r}: {e}") from None


@dataclass(kw_only=True, slots=True)
class StressState:
    runs: int = 0
    failures: int = 0
    started: int = 0
    durations: list[float] = field(default_factory=list)
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    signatures: collections.Counter = field(default_factory=collections.Counter)
    findings: collections.Counter = field(default_factory=collections.Counter)
    """Runs that exited OK but showed a race's face (a recompile limit hit, eager fallback)."""

    def line(self, elapsed_s: float) -> str:
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        return f"{format_elapsed(elapsed_s)}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%)"


def counts_as_failure(result: TrialResult, output: str, opts: StressOptions) -> bool:
    if result.outcome is Outcome.OK:
        return False
    if opts.failure is not None and not opts.failure.search(output):
        return False
    return not (opts.ignore is not None and opts.ignore.search(output))


Inspect = Callable[[str], list[str]]
"""The command's reading of an OK run's output: the race faces it shows (`F10: recompile limit`)."""
Known = Callable[[Path], bool]
"""Whether a failing run's folder holds a catalogued race (the deterministic rule leaves those)."""


def run_stress(
    a: argparse.Namespace,
    *,
    explain: Callable[[Path], str] | None = None,
    inspect: Inspect | None = None,
    known: Known | None = None,
) -> int:
    """Run CMD until a stop rule; `explain(out_dir)` says what the failing runs were (the command
    passes the diagnosis) before the artefacts' folder is named."""
    opts = options_from_args(a)
    if opts.python_note:
        print(f"stress: {opts.python_note}", file=sys.stderr, flush=True)
    loop = _StressLoop(opts, inspect=inspect, known=known)
    loop.run()
    return loop.report(explain)


def arm_name(fixes: tuple[str, ...] | None) -> str:
    return "as is" if fixes is None else ",".join(fixes) or "none"


@dataclass(frozen=True, slots=True)
class _Run:
    index: int
    """The run's number over all arms (its folder's name)."""
    arm: int
    seed: int
    """Plan seed: run i of every arm gets seed i."""


class _StressLoop:
    def __init__(self, opts: StressOptions, *, inspect: Inspect | None = None, known: Known | None = None) -> None:
        self.opts = opts
        self.inspect = inspect
        self.known = known
        self.arms = [StressState() for _ in opts.fix_sets]
        self.state = StressState()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.interrupted = False
        self.deterministic = ""
        self.first: dict[int, tuple[TrialResult, str]] = {}
        self.start = time.monotonic()

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
        plan = plan_json(PlanChoice(name=o.plan, profile=o.plan), run.seed) if o.plan else None
        fixes = o.fix_sets[run.arm]
        env = {} if fixes is None else {"HARNESS_FIXES": ",".join(fixes) or "none"}
        return TrialSpec(
            trial_id=f"stress/{run.index}",
            cell=f"stress:{arm_name(fixes)}",
            workload=WorkloadSpec(kind="command", argv=o.cmd),
            plan=plan,
            timeout_s=o.timeout_s,
            hang_s=o.hang_s,
            trial_index=run.seed,
            cwd=os.getcwd(),
            python=o.python,
            env=env,
        )

    def _worker(self) -> None:
        try:
            while (run := self._take()) is not None:
                folder = self.opts.out_dir / str(run.index)
                result = run_trial(self._spec(run), folder)
                output = folder_text(folder / OUTPUT) or ""
                self._record(run, result, output, folder)
        except BaseException as e:
            with self.lock:
                self.errors.append(e)
            self.stop.set()

    def _record(self, run: _Run, result: TrialResult, output: str, folder: Path) -> None:
        failed = counts_as_failure(result, output, self.opts)
        faces = self.inspect(output) if self.inspect is not None and not failed else []
        with self.lock:
            if self.interrupted:
                # Killed by our own Ctrl-C: not a run of the program, not kept.
                shutil.rmtree(folder, ignore_errors=True)
                return
            for s in (self.state, self.arms[run.arm]):
                s.runs += 1
                s.failures += failed
                s.durations.append(result.duration_s)
                s.outcomes[result.outcome.name] += 1
                if failed:
                    s.signatures[result.signature_summary or result.detail or result.outcome.name] += 1
                for face in faces:
                    s.findings[face] += 1
            if failed:
                print(
                    f"\n--- run {run.index}{self._arm_tag(run)}: {result.outcome.name} {result.detail}; "
                    f"artefacts: {folder}\n{output[:ECHO_BYTES]}{_native_lines(folder)}",
                    file=sys.stderr,
                    flush=True,
                )
            self._check_deterministic(run, result, failed, folder)
        if not failed and not faces:
            shutil.rmtree(folder, ignore_errors=True)

    def _arm_tag(self, run: _Run) -> str:
        return f" [{arm_name(self.opts.fix_sets[run.arm])}]" if len(self.arms) > 1 else ""

    def _check_deterministic(self, run: _Run, result: TrialResult, failed: bool, folder: Path) -> None:
        """Each of the first DETERMINISTIC_RUNS runs failed the same way, fast, in the main thread,
        as no catalogued race: a deterministic failure, not a race (caller holds the lock)."""
        if self.opts.keep_going or run.index >= DETERMINISTIC_RUNS or len(self.arms) > 1:
            return
        self.first[run.index] = (result, str(folder) if failed else "")
        if len(self.first) < DETERMINISTIC_RUNS:
            return
        results = [r for r, _ in self.first.values()]
        same = {(r.outcome, r.signature) for r in results}
        if (
            any(not f for _, f in self.first.values())
            or len(same) != 1
            or any(r.duration_s >= DETERMINISTIC_FAST_S for r in results)
            or any(r.thread_errors for r in results)
            or (self.known is not None and any(self.known(Path(f)) for _, f in self.first.values()))
        ):
            return
        r = results[0]
        self.deterministic = (
            f"a deterministic failure, not a race: each of the first {DETERMINISTIC_RUNS} runs failed "
            f"the same way ({r.outcome.name}: {r.signature_summary or r.detail}) within "
            f"{max(x.duration_s for x in results):.1f} s, and no catalogued race matches it; "
            "stopped (--keep-going runs on)"
        )
        self.stop.set()

    def run(self) -> None:
        o = self.opts
        n = max(1, o.parallel if o.max_runs is None else min(o.parallel, o.max_runs * len(self.arms)))
        threads = [threading.Thread(target=self._worker, name=f"harness-stress-{k}") for k in range(n)]
        for t in threads:
            t.start()
        next_line = time.monotonic() + o.interval_s
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.1)
                if time.monotonic() >= next_line:
                    next_line += o.interval_s
                    with self.lock:
                        print(self.state.line(time.monotonic() - self.start), file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            # Like Go's stress, Ctrl-C ends the loop and the summary still prints; runs cut short
            # are killed, and neither counted nor kept (they would all look like failures).
            with self.lock:
                self.interrupted = True
            self.stop.set()
            killed = kill_child_groups()
            print(f"interrupted: killed {killed} running run(s), not counted", file=sys.stderr, flush=True)
            self._join(threads)
            return
        self._join(threads)
        if self.errors:
            raise ExceptionGroup("stress worker failed", self.errors)

    def _join(self, threads: list[threading.Thread]) -> None:
        deadline = time.monotonic() + self.opts.timeout_s + JOIN_MARGIN_S
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise RuntimeError(f"stress workers still running after their deadline: {stuck}")

    def report(self, explain: Callable[[Path], str] | None = None) -> int:
        s = self.state
        elapsed = time.monotonic() - self.start
        if self.deterministic:
            print(self.deterministic)
        if len(self.arms) > 1:
            print(self._arm_table(elapsed))
        else:
            ci = stats.wilson(s.failures, s.runs)
            bound = (
                f"; p < {100 * stats.rule_of_three(s.runs):.2f}% (rule of three)" if s.runs and not s.failures else ""
            )
            print(
                f"{s.runs} runs completed, {s.failures} failures ({100 * s.failures / max(1, s.runs):.2f}%), over "
                f"{format_elapsed(elapsed)}; Wilson 95% [{100 * ci.low:.2f}%, {100 * ci.high:.2f}%]{bound}"
            )
        if s.durations:
            print(
                f"run time: min {min(s.durations):.2f}s, median {stats.median_or_none(s.durations):.2f}s, "
                f"max {max(s.durations):.2f}s; outcomes: " + " ".join(f"{k}:{v}" for k, v in sorted(s.outcomes.items()))
            )
        for sig, count in s.signatures.most_common():
            print(f"  {count} x {sig}")
        for face, count in s.findings.most_common():
            print(f"  {count} run(s) exited OK but showed {face}")
        if s.failures or s.findings:
            if explain is not None:
                print(explain(self.opts.out_dir))
            print(f"{'failing' if s.failures else 'kept'} runs' artefacts: {self.opts.out_dir}")
        elif self.opts.own_dir:
            shutil.rmtree(self.opts.out_dir, ignore_errors=True)
        return 1 if s.failures else 0

    def _arm_table(self, elapsed: float) -> str:
        """One row per fix set: failures k/n, Wilson 95%, median run time and its ratio to the first."""
        rows = [f"{'fixes':<32} {'failed':>9} {'Wilson 95%':>17} {'median run':>11} {'vs first':>9}"]
        base = stats.median_or_none(self.arms[0].durations)
        for fixes, a in zip(self.opts.fix_sets, self.arms):
            ci = stats.wilson(a.failures, a.runs)
            med = stats.median_or_none(a.durations)
            ratio = f"{med / base:.2f}x" if med and base else "-"
            rows.append(
                f"{arm_name(fixes):<32} {f'{a.failures}/{a.runs}':>9} "
                f"{f'[{100 * ci.low:.1f}%, {100 * ci.high:.1f}%]':>17} "
                f"{f'{med:.2f}s' if med is not None else '-':>11} {ratio:>9}"
            )
        return (
            f"{self.state.runs} runs over {format_elapsed(elapsed)}; run i of every set had plan seed i\n"
            + "\n".join(rows)
        )


def _native_lines(folder: Path, frames: int = 6) -> str:
    """The crash site and innermost native frames the runner kept (harness.trial.native), echoed after
    the output's head, where a long output would have cut them off."""
    path = folder / NATIVE_STACK
    if not path.is_file():
        return ""
    site, shown = native.kept_summary(path.read_text(errors="replace"), frames)
    return f"\nnative crash site: {site}\n" + "\n".join(f"  {line}" for line in shown.splitlines())
