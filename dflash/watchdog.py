"""Stall watchdog: no optimizer step for `train.stall_s` -> dump every thread, say where, exit 4.

A trainer that hangs must say so itself: on one H200 a run with three drafter threads compiling
at once showed no step after 140 s and no message (two threads in Inductor, one in Dynamo), while
one with sequential-startup trained. The thread `dflash-watchdog` reads the replica group's step
counter once per poll (nothing is added to a step) and, when it has not moved for the allowance
(`train.first_step_stall_s` until this run's first step, which includes the first compiles, then
`train.stall_s`):

1. writes `<out_dir>/stall-dump.txt`: a header naming every thread and its innermost meaningful
   frame, then `py-spy dump --native` of this process (if py-spy is on PATH and may attach), else
   `faulthandler.dump_traceback(all_threads=True)`;
2. prints one headline line: how long, after which step, which threads are compiling (Dynamo /
   Inductor frames: slow serialised compiles look the same as a deadlock inside one from outside,
   so the frames are reported and the verdict is left to the reader), which are stuck elsewhere,
   which only wait on them;
3. asks the pipeline to stop (the trainer then exits with EXIT_STALLED) and prints the diagnosis of
   `python -m harness diagnose <dump>` (a subprocess with a timeout: dflash never imports the
   harness), or how to run it when that command is missing or fails.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from dflash import stacks

EXIT_STALLED = 4
DUMP_NAME = "stall-dump.txt"
THREAD_NAME = "dflash-watchdog"
PYSPY_NATIVE_TIMEOUT_S = 20.0
PYSPY_TIMEOUT_S = 10.0
"""py-spy --native can stall on processes with many OS threads (benfred/py-spy#872): a timeout,
then once more without native frames, then faulthandler."""
DIAGNOSE_TIMEOUT_S = 30.0
PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)
_CHILD_ENV_DROP = ("HARNESS_PLAN", "HARNESS_FAULTS")
"""Not passed to py-spy and the diagnosis: a fault plan must not run in the helper processes."""


@dataclass(frozen=True, slots=True)
class Stall:
    at: float
    """time.monotonic() when the stall was declared."""
    step: int
    """Optimizer steps done when the counter stopped."""
    first: bool
    """No step of this run yet (the first-step allowance applied)."""
    waited_s: float
    threads: tuple[stacks.ThreadWhere, ...]
    dump_path: str
    dump_method: str
    headline: str


def headline(
    *,
    step: int,
    first: bool,
    waited_s: float,
    limit_key: str,
    limit_s: float,
    threads: tuple[stacks.ThreadWhere, ...],
    dump_path: str,
) -> str:
    when = "since this run started" if first else f"after step {step}"
    parts = [f"STALLED: no training step for {waited_s:.0f} s {when} ({limit_key}={limit_s:g})"]
    named = [t for t in threads if t.name.startswith("dflash-") or t.compiling]
    busy = [t for t in named if not t.waiting]
    comp = [t.describe() for t in busy if t.compiling]
    other = [t.describe() for t in busy if not t.compiling]
    if comp:
        parts.append(
            "compiling (Dynamo/Inductor frames: slow compiles or stuck in one; the dump tells): " + ", ".join(comp)
        )
    if other:
        parts.append("stuck: " + ", ".join(other))
    waiting = [t.name for t in named if t.waiting]
    if waiting:
        parts.append("waiting on them: " + ", ".join(waiting))
    parts.append(f"dump: {dump_path}")
    return "; ".join(parts)


def _allow_ptrace() -> Callable[[], None]:
    """Let a child (py-spy) attach to this process under Yama ptrace_scope 1, where only ancestors
    may; returns the undo. Best effort: no prctl (not Linux), no Yama, or a denial is fine, py-spy
    then fails and the faulthandler dump is written instead."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0:
            return lambda: None
    except (OSError, AttributeError):
        return lambda: None
    return lambda: libc.prctl(PR_SET_PTRACER, 0, 0, 0, 0)


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}


def _pyspy(pid: int) -> tuple[str | None, str]:
    """(py-spy's dump text or None, a note on what ran)."""
    exe = shutil.which("py-spy")
    if exe is None:
        return None, "py-spy not on PATH"
    undo = _allow_ptrace()
    notes = []
    try:
        for extra, timeout in ((["--native"], PYSPY_NATIVE_TIMEOUT_S), ([], PYSPY_TIMEOUT_S)):
            argv = [exe, "dump", "--pid", str(pid), *extra]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_child_env())
            except subprocess.TimeoutExpired:
                notes.append(f"{' '.join(argv[1:])}: no answer in {timeout:g} s")
                continue
            except OSError as e:
                notes.append(f"{' '.join(argv[1:])}: {e}")
                break
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout, f"py-spy dump{' --native' if extra else ''}"
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            notes.append(f"{' '.join(argv[1:])}: {why}")
    finally:
        undo()
    return None, "; ".join(notes)


_PYSPY_THREAD = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+|\d+) \([^)]*\)(?:: "(.*)")?\s*$')
_FH_THREAD = re.compile(r"^(Current thread|Thread) 0x([0-9a-fA-F]+) \(most recent call first\):$")


def _without_own_thread(pyspy_text: str) -> str:
    """py-spy's dump minus this watchdog thread's block (it only shows the dump being taken)."""
    out, skipping = [], False
    for line in pyspy_text.splitlines():
        m = _PYSPY_THREAD.match(line)
        if m:
            skipping = m.group(1) == THREAD_NAME
        elif skipping and line.strip() and not line.startswith((" ", "\t")):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def _faulthandler_named(text: str, names: dict[int, str]) -> str:
    """faulthandler's all-threads dump minus the dumping (current) thread, each header given its
    thread's name (`Thread 0x... [name] (most recent call first):`; faulthandler prints none)."""
    out, skipping = [], False
    for line in text.splitlines():
        m = _FH_THREAD.match(line)
        if m:
            skipping = m.group(1) == "Current thread"
            name = names.get(int(m.group(2), 16))
            if name is not None and not skipping:
                line = f"Thread 0x{m.group(2)} [{name}] (most recent call first):"
        elif skipping and not line.strip():
            skipping = False
            continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "?"


def write_dump(path: str, threads: tuple[stacks.ThreadWhere, ...], title: str) -> str:
    """Write the stall dump to `path`; returns the method ('py-spy dump --native', ...)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # The versions travel with the dump: a dump read on another machine is judged on its own torch.
    header = [
        title,
        f"torch {_torch_version()}, Python {platform.python_version()}",
        "threads (name = Python thread ident: innermost meaningful frame):",
    ]
    header += [
        f"  {t.name} = 0x{t.ident:016x}: {t.where}{' [compiling]' if t.compiling else ''}"
        f"{' [waiting]' if t.waiting else ''}"
        for t in threads
    ]
    text, note = _pyspy(os.getpid())
    method = note
    if text is None:
        method = "faulthandler"
        with tempfile.TemporaryFile("w+") as tmp:  # faulthandler writes to a file descriptor
            faulthandler.dump_traceback(file=tmp, all_threads=True)
            tmp.flush()
            tmp.seek(0)
            text = (
                f"py-spy unavailable ({note}); faulthandler.dump_traceback(all_threads=True):\n"
                + _faulthandler_named(tmp.read(), {t.ident: t.name for t in threads})
            )
    else:
        text = _without_own_thread(text)
    with open(path, "w") as f:
        f.write("\n".join(header) + "\n\n" + text)
    return method


def diagnose(path: str, err: TextIO, *, timeout_s: float = DIAGNOSE_TIMEOUT_S) -> bool:
    """Print `python -m harness diagnose <path>`'s answer; if it is missing or fails, how to run it."""
    argv = [sys.executable, "-m", "harness", "diagnose", path]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=_child_env(), stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0:
        print(proc.stdout.rstrip() or f"python -m harness diagnose {path}: no output", file=err, flush=True)
        return True
    print(f"diagnose with: python -m harness diagnose {path}", file=err, flush=True)
    return False


class Watchdog:
    """Watches `progress()` (steps done) from a daemon thread; `stall` is set once it fires."""

    def __init__(
        self,
        *,
        progress: Callable[[], int],
        stall_s: float,
        first_step_stall_s: float,
        out_dir: str,
        err: TextIO,
        on_stall: Callable[[], None] = lambda: None,
        quiet: Callable[[], bool] = lambda: False,
        diagnose_timeout_s: float = DIAGNOSE_TIMEOUT_S,
    ) -> None:
        self.progress = progress
        self.stall_s = stall_s
        self.first_step_stall_s = first_step_stall_s
        self.dump_path = os.path.join(out_dir, DUMP_NAME)
        self.err = err
        self.on_stall = on_stall
        self.quiet = quiet
        self.diagnose_timeout_s = diagnose_timeout_s
        self.stall: Stall | None = None
        self.finished = threading.Event()
        """Set when the watchdog has nothing more to print (stopped, or diagnosed after a stall)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        limits = [s for s in (stall_s, first_step_stall_s) if s > 0]
        self.poll_s = max(0.05, min(1.0, min(limits) / 10)) if limits else 1.0

    @property
    def enabled(self) -> bool:
        return self.stall_s > 0

    def start(self) -> None:
        if not self.enabled:
            self.finished.set()
            return
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            start = last = self.progress()
            since = time.monotonic()
            while not self._stop.wait(self.poll_s):
                step = self.progress()
                now = time.monotonic()
                if step != last:
                    last, since = step, now
                    continue
                first = step == start
                limit = self.first_step_stall_s if first else self.stall_s
                if limit > 0 and now - since >= limit and not self.quiet():
                    self._fire(step, first, now - since, limit)
                    return
        finally:
            self.finished.set()

    def _fire(self, step: int, first: bool, waited_s: float, limit_s: float) -> None:
        threads = tuple(stacks.snapshot(skip=(threading.get_ident(),)))
        key = "train.first_step_stall_s" if first else "train.stall_s"
        line = headline(
            step=step,
            first=first,
            waited_s=waited_s,
            limit_key=key,
            limit_s=limit_s,
            threads=threads,
            dump_path=self.dump_path,
        )
        try:
            method = write_dump(self.dump_path, threads, line)
        except OSError as e:
            method = f"not written: {e}"
        self.stall = Stall(
            at=time.monotonic(),
            step=step,
            first=first,
            waited_s=waited_s,
            threads=threads,
            dump_path=self.dump_path,
            dump_method=method,
            headline=line,
        )
        print(line, file=self.err, flush=True)
        print(f"stall dump ({method}): {self.dump_path}", file=self.err, flush=True)
        self.on_stall()
        diagnose(self.dump_path, self.err, timeout_s=self.diagnose_timeout_s)
