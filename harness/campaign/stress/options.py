"""`harness stress`'s options, checked: the command and its interpreter, the numbers, the fix
sets, the regexps and the plan. Bad input is a UsageError (one line, exit 2)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.args import UsageError
from harness.campaign import arms, bytecode_cache
from harness.campaign.plans import PlanChoice, plan_json
from harness.diagnosis import probes
from harness.trial.interpreter import interpreter_versions

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
    fix_sets = arms.fix_sets(a.fix)
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
        plan_json(PlanChoice(name=a.plan, profile=a.plan), 0)  # unknown profile -> InvalidPlan (bad input)
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
