"""Stack dumps of a hung child: py-spy first, faulthandler (SIGUSR1) as the fallback.

`dump(pid, out_dir)` writes `pyspy.json` (machine: the hang signature is built from it) and
`hang_dump.txt` (human: threads with identical stacks grouped, frames innermost first, like
py-spy's own text). py-spy reads the target's memory and runs no code in it, so it works on a
process whose threads are all blocked; `--native` adds C frames but takes longer on torch
processes (0.45 s vs 0.02 s for a compile_lock hang on the 2-core CPU box) and can
stall on many OS threads (benfred/py-spy#872), hence a timeout and a retry without it.

Fallback when py-spy is missing or fails: the harness bootstrap registers
`faulthandler.register(SIGUSR1, all_threads=True)` writing to stderr, which is the trial's output
file, so we send SIGUSR1 and parse the new tail of that file. SIGUSR1 is only sent when
/proc/<pid>/status shows it is caught: its default action would kill the child and lose the dump.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.trial.folder import HANG_DUMP, PYSPY

PYSPY_NATIVE_TIMEOUT_S = 30.0
PYSPY_TIMEOUT_S = 15.0
FAULTHANDLER_WAIT_S = 3.0
"""How long to wait for the faulthandler dump to appear in the output after SIGUSR1."""
_POLL_S = 0.05


@dataclass(kw_only=True, slots=True, frozen=True)
class Frame:
    name: str
    filename: str
    line: int = 0

    @property
    def is_python(self) -> bool:
        return self.filename.endswith(".py") or self.filename.startswith("<")

    def __str__(self) -> str:
        if not self.line:  # native frame: py-spy prints the library only
            return f"{self.name} ({self.filename.rsplit('/', 1)[-1]})"
        return f"{self.name} ({_short(self.filename)}:{self.line})"


@dataclass(kw_only=True, slots=True, frozen=True)
class ThreadStack:
    name: str
    """Python thread name (py-spy) or `Thread 0x...` (faulthandler prints no names)."""
    thread_id: str
    status: str = ""
    """`idle`, `active`, `active+gil` (py-spy), or `current` (faulthandler's crashing thread)."""
    frames: tuple[Frame, ...] = ()
    """Innermost first."""


@dataclass(kw_only=True, slots=True)
class HangDump:
    method: str
    """`py-spy --native`, `py-spy`, `faulthandler` or `none`."""
    threads: tuple[ThreadStack, ...] = ()
    text: str = ""
    json_path: str | None = None
    text_path: str | None = None
    errors: list[str] = field(default_factory=list)
    """Why earlier methods failed (kept for the report)."""


def find_pyspy() -> str | None:
    """py-spy next to the running interpreter (the venv) first, then on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("py-spy")


_DEFAULT = object()


def dump(
    pid: int,
    out_dir: str | os.PathLike[str],
    *,
    output_path: str | None = None,
    pyspy: str | None | object = _DEFAULT,
    note: str = "",
) -> HangDump:
    """Dump every Python thread of `pid` into `out_dir`; never raises for a failed dump.

    `output_path` is the file the child's stderr goes to (needed for the faulthandler fallback);
    `pyspy=None` skips py-spy (tests of the fallback); `note` is a first line above the dump (the
    torch it ran on: a dump read on another machine is judged on it)."""
    out = Path(out_dir)
    exe = find_pyspy() if pyspy is _DEFAULT else pyspy
    errors: list[str] = []
    result = None
    if exe:
        result = _try_pyspy(str(exe), pid, out, errors)
    else:
        errors.append("py-spy not found")
    if result is None and output_path is not None:
        result = _try_faulthandler(pid, output_path, errors)
    if result is None:
        result = HangDump(method="none")
    result.errors = errors
    result.text = (f"{note}\n" if note else "") + render_text(
        result.threads, header=f"{result.method} dump of pid {pid}"
    )
    if errors:
        result.text += "".join(f"# {e}\n" for e in errors)
    text_path = out / HANG_DUMP
    text_path.write_text(result.text, encoding="utf-8", errors="replace")
    result.text_path = str(text_path)
    return result


def _try_pyspy(exe: str, pid: int, out: Path, errors: list[str]) -> HangDump | None:
    attempts = (("py-spy --native", ["--native"], PYSPY_NATIVE_TIMEOUT_S), ("py-spy", [], PYSPY_TIMEOUT_S))
    for method, extra, timeout in attempts:
        cmd = [exe, "dump", "--pid", str(pid), "--json", *extra]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except (subprocess.TimeoutExpired, OSError) as exc:
            errors.append(f"{method}: {type(exc).__name__}: {exc}")
            continue
        if proc.returncode != 0:
            errors.append(f"{method}: rc={proc.returncode}: {_first_line(proc.stderr)}")
            continue
        try:
            data = json.loads(proc.stdout)
        except ValueError as exc:
            errors.append(f"{method}: bad JSON: {exc}")
            continue
        json_path = out / PYSPY
        json_path.write_bytes(proc.stdout)
        return HangDump(method=method, threads=parse_pyspy_json(data), json_path=str(json_path))
    return None


def snapshot(pid: int, pyspy: str | None) -> tuple[ThreadStack, ...] | None:
    """A second, quick look (py-spy without native frames, nothing written): the threads, or None
    when py-spy is missing or failed. The watcher compares it with the first dump to confirm a hang."""
    if not pyspy:
        return None
    try:
        proc = subprocess.run(
            [pyspy, "dump", "--pid", str(pid), "--json"], capture_output=True, timeout=PYSPY_TIMEOUT_S, check=False
        )
        return parse_pyspy_json(json.loads(proc.stdout)) if proc.returncode == 0 else None
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return None


def python_stacks(threads: tuple[ThreadStack, ...]) -> dict[str, tuple[Frame, ...]]:
    """Each thread's Python frames by thread id: what two dumps of a hung process share."""
    return {t.thread_id: tuple(f for f in t.frames if f.is_python) for t in threads}


def same_stacks(a: tuple[ThreadStack, ...], b: tuple[ThreadStack, ...]) -> bool:
    """Every thread of both dumps stands at the same Python frames (lines included)."""
    return bool(a) and python_stacks(a) == python_stacks(b)


def read_pyspy_json(path: str | os.PathLike[str] | zipfile.Path) -> tuple[ThreadStack, ...]:
    """The threads of a stored `pyspy.json` (a trial's artefact, in its folder or packed:
    harness.stores.zips): report excerpts, resign."""
    path = path if isinstance(path, zipfile.Path) else Path(path)
    return parse_pyspy_json(json.loads(path.read_text(encoding="utf-8")))


def parse_pyspy_json(data: object) -> tuple[ThreadStack, ...]:
    """py-spy `dump --json`: a list of {thread_name, thread_id, active, owns_gil, frames[...]}."""
    threads = []
    for t in data if isinstance(data, list) else ():
        status = ("active+gil" if t.get("owns_gil") else "active") if t.get("active") else "idle"
        frames = tuple(
            Frame(name=str(f.get("name", "?")), filename=str(f.get("filename", "?")), line=int(f.get("line") or 0))
            for f in t.get("frames") or ()
        )
        threads.append(
            ThreadStack(
                name=str(t.get("thread_name") or "?"),
                thread_id=str(t.get("os_thread_id") or t.get("thread_id")),
                status=status,
                frames=frames,
            )
        )
    return tuple(threads)


def _try_faulthandler(pid: int, output_path: str, errors: list[str]) -> HangDump | None:
    if not _catches_signal(pid, signal.SIGUSR1):
        errors.append("faulthandler: SIGUSR1 is not caught by the child (bootstrap not loaded)")
        return None
    offset = os.path.getsize(output_path)
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        errors.append("faulthandler: process already gone")
        return None
    deadline = time.monotonic() + FAULTHANDLER_WAIT_S
    threads: tuple[ThreadStack, ...] = ()
    size = -1
    while time.monotonic() < deadline:
        time.sleep(_POLL_S)
        # faulthandler writes the whole dump from one signal handler run: once frames are there
        # and the file stopped growing for one poll, the dump is complete.
        new_size = os.path.getsize(output_path)
        if threads and new_size == size:
            break
        size = new_size
        threads = parse_faulthandler(_read_from(output_path, offset))
    if not threads:
        errors.append("faulthandler: no dump appeared in the output")
        return None
    return HangDump(method="faulthandler", threads=threads)


_FH_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str) -> tuple[ThreadStack, ...]:
    """faulthandler's all-threads dump: `Thread 0x... (most recent call first):` blocks."""
    threads: list[ThreadStack] = []
    name = tid = status = None
    frames: list[Frame] = []
    for line in text.splitlines():
        head = _FH_HEADER.match(line)
        if head:
            if tid is not None:
                threads.append(ThreadStack(name=name, thread_id=tid, status=status, frames=tuple(frames)))
            tid = head.group(2)
            name = head.group(3) or f"Thread {tid}"
            status = "current" if head.group(1).startswith("Current") else ""
            frames = []
            continue
        frame = _FH_FRAME.match(line)
        if frame and tid is not None:
            frames.append(Frame(name=frame.group(3), filename=frame.group(1), line=int(frame.group(2))))
        elif tid is not None and line.strip() and not line.startswith(" "):
            threads.append(ThreadStack(name=name, thread_id=tid, status=status, frames=tuple(frames)))
            tid = None
    if tid is not None:
        threads.append(ThreadStack(name=name, thread_id=tid, status=status, frames=tuple(frames)))
    return tuple(threads)


def render_text(threads: tuple[ThreadStack, ...], *, header: str = "") -> str:
    """Group threads with identical stacks: `3 threads: a, b, c` then frames innermost first."""
    groups: dict[tuple[Frame, ...], list[ThreadStack]] = {}
    for t in threads:
        groups.setdefault(t.frames, []).append(t)
    lines = [header] if header else []
    for frames, members in sorted(groups.items(), key=lambda kv: kv[1][0].name):
        statuses = {t.status for t in members}
        if len(statuses) == 1:  # the usual case: say the status once, at the end
            status = statuses.pop()
            names = ", ".join(t.name for t in members) + (f" ({status})" if status else "")
        else:
            names = ", ".join(f"{t.name} ({t.status or '?'})" for t in members)
        count = f"{len(members)} thread" + ("s" if len(members) > 1 else "")
        lines.append(f"{count}: {names}")
        lines.extend(f"    {f}" for f in frames)
        lines.append("")
    return "\n".join(lines) + "\n"


_PLUMBING = frozenset(
    {"Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap", "_run_code", "_run_module_as_main", "<module>"}
)
"""Frames every thread (or the main one) starts with: nothing about where it is stuck."""


def excerpt(threads: tuple[ThreadStack, ...], *, keep, python_frames: int = 12) -> str:
    """render_text of the threads `keep(thread)` selects, each cut to the native frame it waits in
    (if any) and its innermost `python_frames` Python frames: a REPORT.md excerpt, where whole
    dumps run to hundreds of lines. 12 reach from a blocked `autograd.grad` out to the Dynamo
    trace that called it in the G2 hang."""

    def cut(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
        named = [f for f in frames if not f.name.startswith("0x") and f.name not in _PLUMBING]
        head = named[:1] if named and not named[0].is_python else []
        return tuple(head + [f for f in named if f.is_python][:python_frames])

    return render_text(
        tuple(
            ThreadStack(name=t.name, thread_id=t.thread_id, status=t.status, frames=cut(t.frames))
            for t in threads
            if keep(t)
        )
    )


def _catches_signal(pid: int, sig: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    match = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)", status, re.M)
    return bool(match) and bool(int(match.group(1), 16) >> (sig - 1) & 1)


def _read_from(path: str, offset: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", errors="replace")


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text.splitlines()[0] if text else "(no stderr)"


def _short(filename: str) -> str:
    """Trim to the part after site-packages or the last 2 path parts, as py-spy does."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    parts = filename.split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else filename


_PYSPY_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)(?:: "(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^\s+(.+?) \((.+?)(?::(\d+))?\)\s*$")


def parse_pyspy_text(text: str) -> tuple[ThreadStack, ...]:
    """py-spy `dump` as printed (no --json): `Thread 123 (idle): "name"` then indented
    `function (file:line)` frames, innermost first; native frames have no line. What a user
    pastes, and what a trainer's stall dump holds when py-spy was on its PATH."""
    threads: list[ThreadStack] = []
    head: re.Match | None = None
    frames: list[Frame] = []

    def close() -> None:
        if head is not None:
            # A thread Python never named (the autograd engine's device thread) is nameless in
            # faulthandler's form too, so that signature.hang_role can tell it by its frames.
            tid = head.group(1)
            nameless = f"Thread {tid if tid.startswith('0x') else hex(int(tid))}"
            threads.append(
                ThreadStack(
                    name=head.group(3) or nameless, thread_id=head.group(1), status=head.group(2), frames=tuple(frames)
                )
            )

    for line in text.splitlines():
        m = _PYSPY_THREAD.match(line)
        if m:
            close()
            head, frames = m, []
            continue
        f = _PYSPY_FRAME.match(line) if head is not None else None
        if f:
            frames.append(Frame(name=f.group(1), filename=f.group(2), line=int(f.group(3) or 0)))
        elif head is not None and line.strip() and not line.startswith((" ", "\t")):
            close()
            head = None
    close()
    return tuple(threads)


def parse_dump_text(text: str) -> tuple[ThreadStack, ...]:
    """The threads of an all-thread dump printed as text: py-spy's `dump`, else faulthandler's."""
    return parse_pyspy_text(text) or parse_faulthandler(text)


_RENDER_HEAD = re.compile(r"^(\d+) threads?: (.*?)\s*$")
_RENDER_FRAME = re.compile(r"^    (.+?) \((.+?)(?::(\d+))?\)\s*$")
_RENDER_STATUS = re.compile(r"^(.*) \(([\w+?]*)\)$")


def parse_rendered(text: str) -> tuple[ThreadStack, ...]:
    """The harness's own `hang_dump.txt` (render_text: `2 threads: a, b (idle)` then indented
    frames): one ThreadStack per named thread, so a dump kept with a trial diagnoses as it did."""
    threads: list[ThreadStack] = []
    names: list[tuple[str, str]] = []
    frames: list[Frame] = []

    def close() -> None:
        threads.extend(
            ThreadStack(name=n, thread_id=f"{n}#{len(threads) + i}", status=st, frames=tuple(frames))
            for i, (n, st) in enumerate(names)
        )

    for line in text.splitlines():
        head = _RENDER_HEAD.match(line)
        if head:
            close()
            frames = []
            listed = head.group(2)
            common = _RENDER_STATUS.match(listed)
            status = ""
            if common and "," not in common.group(2):
                listed, status = common.group(1), common.group(2)
            names = []
            for part in listed.split(", "):
                own = _RENDER_STATUS.match(part)
                names.append((own.group(1), own.group(2)) if own and not status else (part, status))
            continue
        f = _RENDER_FRAME.match(line) if names else None
        if f:
            frames.append(Frame(name=f.group(1), filename=f.group(2), line=int(f.group(3) or 0)))
    close()
    return tuple(threads)
