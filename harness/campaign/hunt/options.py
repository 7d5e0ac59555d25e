"""`harness hunt`'s options, checked, and the pytest command line of one run.

Each run is `python -m pytest -p run-parallel -p harness.campaign.hunt.plugin [-p timeout
--timeout S] -p no:cacheprovider --parallel-threads T -o junit_logging=all --tb=native -q
PYTEST_ARGS`, with the junit report in the run's folder (the plugin sets pytest's `--junitxml`):
- pytest-run-parallel runs each test body in T threads at once (its `thread_unsafe` and
  `parallel_threads` markers, thread-unsafe fixtures and its reading of the test's own calls
  still keep a test in one thread; the hunt plugin only stops that reading at torch's internals);
- pytest-timeout cuts a hung test with its id, so that the run goes on;
- the cache stays as the user left it (`--lf` is theirs);
- the junit report holds each failure's text with the test's captured output, in Python's own
  traceback (`--tb=native`): pytest's lists each frame's source, and torch's source quotes the
  messages the catalogue names races by (`Detected that you are using FX...` in every compiled
  call's frame), so any failure through a compiled call would read as those races.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.args import UsageError
from harness.campaign import arms, bytecode_cache
from harness.campaign.hunt import plugin as hunt_plugin
from harness.campaign.hunt.records import HuntKey
from harness.campaign.plans import PlanChoice, plan_json

JUNIT = "junit.xml"
RUN_PARALLEL_MIN = (0, 10)
HANG_MARGIN_S = 30.0
"""A run idle this long past the per-test timeout is a hang of the whole run (the runner's)."""
_OURS = ("--parallel-threads", "--junitxml", "--junit-xml")


@dataclass(frozen=True, slots=True)
class HuntOptions:
    pytest_args: tuple[str, ...]
    runs: int
    threads: int
    workers: int
    out_dir: Path
    own_dir: bool
    """out_dir is a new temp folder of ours (named at the end: a rerun with -o resumes it)."""
    plan: str | None = None
    fix_sets: tuple[tuple[str, ...] | None, ...] = (None,)
    """One arm per set, as in stress: None runs the tests as they are; a tuple is the fixes the bootstrap applies (TrialSpec.fixes)."""
    test_timeout_s: float = 120.0
    timeout_s: float = 1800.0
    as_json: bool = False
    timeout_plugin: bool = True
    """pytest-timeout is installed: a hung test is cut by it."""
    bytecode_cache: Path | None = None
    """Where runs read and write Python bytecode (not part of the key: a resumed hunt may differ)."""

    @property
    def key(self) -> HuntKey:
        return HuntKey(pytest_args=self.pytest_args, threads=self.threads, plan=self.plan, fix_sets=self.fix_sets)

    @property
    def hang_s(self) -> float:
        return self.test_timeout_s + HANG_MARGIN_S


def options_from_args(a: argparse.Namespace) -> HuntOptions:
    args = list(a.pytest_args)
    if args[:1] == ["--"]:
        args = args[1:]
    _check_args(args)
    _check_numbers(a)
    _check_run_parallel()
    if a.plan is not None:
        plan_json(PlanChoice(name=a.plan, profile=a.plan), 0)  # unknown profile -> InvalidPlan (bad input)
    cache = bytecode_cache.folder(getattr(a, "bytecode_cache", None))
    return HuntOptions(
        pytest_args=tuple(args),
        runs=a.runs,
        threads=a.threads,
        workers=a.workers or os.cpu_count() or 1,
        out_dir=Path(a.output) if a.output else Path(tempfile.mkdtemp(prefix="harness-hunt-")),
        own_dir=not a.output,
        plan=a.plan,
        fix_sets=arms.fix_sets(a.fix),
        test_timeout_s=a.test_timeout,
        timeout_s=a.timeout,
        as_json=a.json,
        timeout_plugin=importlib.util.find_spec("pytest_timeout") is not None,
        bytecode_cache=cache,
    )


def _check_args(args: list[str]) -> None:
    if not args:
        raise UsageError("hunt needs pytest's arguments: python -m harness hunt [options] -- PYTEST_ARGS ...")
    for arg in args:
        if arg.split("=", 1)[0] in _OURS:
            raise UsageError(f"{arg.split('=', 1)[0]} is the hunt's own (give --threads; the report is per run)")


def _check_numbers(a: argparse.Namespace) -> None:
    for name in ("runs", "threads", "workers"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise UsageError(f"--{name} must be >= 1")
    for name in ("test_timeout", "timeout"):
        if not getattr(a, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be > 0")


def _check_run_parallel() -> None:
    """pytest-run-parallel >= 0.10 in this interpreter, which runs the tests."""
    try:
        version = importlib.metadata.version("pytest-run-parallel")
    except importlib.metadata.PackageNotFoundError:
        version = None
    have = tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) if version else ()
    if have < RUN_PARALLEL_MIN:
        found = f"{version} is installed" if version else "it is not installed"
        raise UsageError(
            f"hunt runs the tests with pytest-run-parallel>=0.10 ({found} in {sys.executable}): "
            "pip install 'pytest-run-parallel>=0.10'"
        )


def pytest_argv(opts: HuntOptions, threads: int) -> tuple[str, ...]:
    """One run's command line: the user's arguments last, so that theirs select the tests."""
    timeout = ("-p", "timeout", f"--timeout={opts.test_timeout_s:g}") if opts.timeout_plugin else ()
    return (
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "run-parallel",
        "-p",
        hunt_plugin.__name__,
        *timeout,
        "-p",
        "no:cacheprovider",
        f"--parallel-threads={threads}",
        "-o",
        "junit_logging=all",
        "-o",
        "junit_log_passing_tests=false",
        "--tb=native",
        "-q",
        *opts.pytest_args,
    )
