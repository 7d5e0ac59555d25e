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
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import NATIVE_STACK_NAME, OUTPUT_NAME, run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

ECHO_BYTES = 2048
"""Bytes of a failing run's output echoed to the terminal (Go stress: 2 KiB)."""


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


def options_from_args(a: argparse.Namespace) -> StressOptions:
    cmd = list(a.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise MatrixError("stress needs a command: python -m harness stress [options] -- CMD ...")
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).is_file():
        raise MatrixError(f"program {cmd[0]!r} not found")
    for name in ("parallel", "max_runs", "max_fails"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise MatrixError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("timeout", "hang", "max_time", "interval"):
        if getattr(a, name) is not None and not getattr(a, name) > 0:
            raise MatrixError(f"--{name.replace('_', '-')} must be > 0")
    if a.plan is not None:
        plan_json(PlanChoice(name=a.plan, profile=a.plan), 0)  # unknown profile -> MatrixError
    python = getattr(a, "python", None)
    if python is not None and not Path(cmd[0]).name.startswith("python"):
        raise MatrixError(f"--python: CMD starts with {cmd[0]!r}, not a Python interpreter to replace")
    if python is not None and not Path(python).is_file():
        raise MatrixError(f"--python: no interpreter at {python}")
    return StressOptions(
        cmd=tuple(cmd), parallel=a.parallel, timeout_s=a.timeout, hang_s=a.hang or a.timeout,
        max_runs=a.max_runs, max_fails=a.max_fails, max_time_s=a.max_time,
        failure=_regexp(a.failure, "--failure"), ignore=_regexp(a.ignore, "--ignore"), plan=a.plan, python=python,
        out_dir=Path(a.output) if a.output else Path(tempfile.mkdtemp(prefix="harness-stress-")),
        own_dir=not a.output, interval_s=a.interval,
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

    def line(self, elapsed_s: float) -> str:
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        return f"{format_elapsed(elapsed_s)}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%)"


def counts_as_failure(result: TrialResult, output: str, opts: StressOptions) -> bool:
    if result.outcome is Outcome.OK:
        return False
    if opts.failure is not None and not opts.failure.search(output):
        return False
    return not (opts.ignore is not None and opts.ignore.search(output))


def run_stress(a: argparse.Namespace, *, explain: Callable[[Path], str] | None = None) -> int:
    """Run CMD until a stop rule; `explain(out_dir)` says what the failing runs were (the command
    passes the diagnosis) before the artefacts' folder is named."""
    opts = options_from_args(a)
    loop = _StressLoop(opts)
    loop.run()
    return loop.report(explain)


class _StressLoop:
    def __init__(self, opts: StressOptions) -> None:
        self.opts = opts
        self.state = StressState()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.interrupted = False
        self.start = time.monotonic()

    def _take(self) -> int | None:
        o, s = self.opts, self.state
        with self.lock:
            over_time = o.max_time_s is not None and time.monotonic() - self.start >= o.max_time_s
            if (self.stop.is_set() or over_time or (o.max_runs is not None and s.started >= o.max_runs)
                    or (o.max_fails is not None and s.failures >= o.max_fails)):
                return None
            s.started += 1
            return s.started - 1

    def _worker(self) -> None:
        try:
            while (i := self._take()) is not None:
                plan = plan_json(PlanChoice(name=self.opts.plan, profile=self.opts.plan), i) if self.opts.plan else None
                spec = TrialSpec(trial_id=f"stress/{i}", cell="stress", workload=WorkloadSpec(
                    kind="command", argv=self.opts.cmd), plan=plan, timeout_s=self.opts.timeout_s,
                    hang_s=self.opts.hang_s, trial_index=i, cwd=os.getcwd(), python=self.opts.python)
                folder = self.opts.out_dir / str(i)
                result = run_trial(spec, folder)
                output = (folder / OUTPUT_NAME).read_text(errors="replace") if (folder / OUTPUT_NAME).exists() else ""
                self._record(result, output, folder)
        except BaseException as e:
            with self.lock:
                self.errors.append(e)
            self.stop.set()

    def _record(self, result: TrialResult, output: str, folder: Path) -> None:
        failed = counts_as_failure(result, output, self.opts)
        with self.lock:
            if self.interrupted:
                return
            s = self.state
            s.runs += 1
            s.failures += failed
            s.durations.append(result.duration_s)
            s.outcomes[result.outcome.name] += 1
            if failed:
                s.signatures[result.signature_summary or result.detail or result.outcome.name] += 1
                print(f"\n--- run {result.trial_index}: {result.outcome.name} {result.detail}; "
                      f"artefacts: {folder}\n{output[:ECHO_BYTES]}{_native_lines(folder)}", file=sys.stderr, flush=True)
        if not failed:
            shutil.rmtree(folder, ignore_errors=True)

    def run(self) -> None:
        n = max(1, self.opts.parallel if self.opts.max_runs is None else min(self.opts.parallel, self.opts.max_runs))
        threads = [threading.Thread(target=self._worker, name=f"harness-stress-{k}") for k in range(n)]
        for t in threads:
            t.start()
        next_line = time.monotonic() + self.opts.interval_s
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.1)
                if time.monotonic() >= next_line:
                    next_line += self.opts.interval_s
                    with self.lock:
                        print(self.state.line(time.monotonic() - self.start), file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            # Like Go's stress, Ctrl-C ends the loop and the summary still prints; runs cut short
            # are killed and not counted (they would all look like failures).
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
        ci = stats.wilson(s.failures, s.runs)
        bound = f"; p < {100 * stats.rule_of_three(s.runs):.2f}% (rule of three)" if s.runs and not s.failures else ""
        print(f"{s.runs} runs completed, {s.failures} failures ({100 * s.failures / max(1, s.runs):.2f}%), over "
              f"{format_elapsed(elapsed)}; Wilson 95% [{100 * ci.low:.2f}%, {100 * ci.high:.2f}%]{bound}")
        if s.durations:
            print(f"run time: min {min(s.durations):.2f}s, median {stats.median_or_none(s.durations):.2f}s, "
                  f"max {max(s.durations):.2f}s; outcomes: "
                  + " ".join(f"{k}:{v}" for k, v in sorted(s.outcomes.items())))
        for sig, count in s.signatures.most_common():
            print(f"  {count} x {sig}")
        if s.failures:
            if explain is not None:
                print(explain(self.opts.out_dir))
            print(f"failing runs' artefacts: {self.opts.out_dir}")
        elif self.opts.own_dir:
            shutil.rmtree(self.opts.out_dir, ignore_errors=True)
        return 1 if s.failures else 0


def _native_lines(folder: Path, frames: int = 6) -> str:
    """The crash site and innermost native frames the runner kept (harness.trial.native), echoed after
    the output's head, where a long output would have cut them off."""
    path = folder / NATIVE_STACK_NAME
    if not path.is_file():
        return ""
    site, shown = native.kept_summary(path.read_text(errors="replace"), frames)
    return f"\nnative crash site: {site}\n" + "\n".join(f"  {line}" for line in shown.splitlines())
