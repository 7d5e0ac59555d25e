"""A trial's output read into Python tracebacks (`parse_tracebacks`): chained blocks, exception
groups, the threads that excepthook headers and log lines name, log prefixes, tracebacks that
threads printed at once, line by line interleaved (`_Reader`), a SubprocException's nested
traceback; the thread that raised an exception another thread re-raised (`reraise_of`); which
traceback is the failure (`first_failure`, `primary_traceback`), and an exception printed without
a traceback (`bare_exception`).

Signatures (harness.trial.signature) are built from what is read here: a change that moves a key
bumps SIGNATURE_VERSION there, and the `(vN)` notes name the version that brought a rule.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.trial.frames import frame_id, is_library, is_torch, module_of
from harness.trial.hangs import Frame
from harness.trial.messages import KNOWN_MESSAGES

# Exceptions that follow another thread's failure (stop requests, broken barriers); the first
# other exception in the output is the cause.
SECONDARY_TYPES = frozenset(
    {
        "StageStopped",
        "BrokenBarrierError",
        "KeyboardInterrupt",
        "SystemExit",
        "ChannelClosed",
        "ExceptionGroup",
        "BaseExceptionGroup",  # containers: their first member is the cause
    }
)


@dataclass(kw_only=True, slots=True, frozen=True)
class PyTraceback:
    """One printed traceback block; `frames` innermost first, `chain` = earlier blocks it
    was raised from (`During handling ...` / `The above exception was the direct cause ...`)."""

    thread: str | None
    frames: tuple[Frame, ...]
    exc_type: str
    message: str
    chain: tuple[PyTraceback, ...] = ()
    sources: tuple[str, ...] = ()
    """Each frame's source line as printed (empty where none was), in the order of `frames`."""
    unraisable: bool = False
    """Printed under `Exception ignored in ...` (sys.unraisablehook: a finaliser's or GC's
    exception, which failed nothing), not by a failing thread."""
    handled: bool = False
    """Logged at warning level or below (torch's `W1130 ...] ` prefix, logging's `WARNING:`):
    the program carried on, e.g. Inductor's `Failed to reload cubin file` warning."""

    @property
    def short_type(self) -> str:
        return self.exc_type.rsplit(".", 1)[-1]

    @property
    def origin_frames(self) -> tuple[Frame, ...]:
        """The frames of the thread that raised it: re-raised in another thread (`future.result()`,
        `raise errors[0]`), the traceback also shows that thread's frames, outside `reraise_of`."""
        reraise = reraise_of(self.frames, self.sources)
        return self.frames[: reraise.cut] if reraise is not None else self.frames

    def all_text(self) -> str:
        parts = [f"{t.exc_type}: {t.message}" for t in (*self.chain, self)]
        return "\n".join(parts)


_TB_START = "Traceback (most recent call last):"
# Searched, not matched at the start: a logger's prefix (`ERROR:root:...`, a timestamp) or
# torchrun's `[rank0]: ` can precede it.
_TB_START_AT = re.compile(r"Traceback \(most recent call last\):")
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# Searched too: threads' excepthooks that print at once interleave their output, and the C hook
# writes a source line and its newline separately, so the next frame line can end that line.
_TB_FRAME = re.compile(r'(?:^|\s)File "([^"]*)", line (\d+), in (\S.*?)\s*$')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
# What an exception line looks like when the output is garbled (several tracebacks at once) or
# has no traceback at all: a class named like an exception, or c10's C++ one.
_EXC_NAME = (
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Failed|Interrupt|Exit|Group"
    r"|Stopped|Closed)|c10::\w+"
)
_LIKELY_EXC_LINE = re.compile(rf"^({_EXC_NAME})(?::\s?(.*))?$")
# Only the start: a multi-line message spreads the header over several lines.
_REPORT_HEADER = re.compile(r"^=== thread (\S+) failed: ")
# threading.excepthook's header, or a user's copy of it (`print(f"Exception in thread {name}")`,
# `logging.exception(...)` behind a log prefix). The last one on a line counts: two hooks that
# print at once give `Exception in thread Exception in thread caller-0:`. A name is one word, or
# Python's `Thread-3 (target)` for a nameless thread with a target (3.10+).
_HOOK_HEADER = "Exception in thread "
_THREAD_NAME = re.compile(r"[^\s:]+(?: \([^)\s]*\))?")
# A log line right before a traceback that says which thread (`step failed in thread caller-0`);
# only an error's log line: `INFO: ... in thread pool ...` before a crash names nothing.
_ERROR_WORDS = re.compile(r"\b(?:ERROR|CRITICAL|FATAL|[Ee]xception|[Ee]rror|[Ff]ail(?:ed|ure|s)?)\b")
_THREAD_MENTION = re.compile(r"\bin thread ([^\s:,]+(?: \([^)\s]*\))?)")
# _thread.start_new_thread's uncaught exception goes to sys.unraisablehook, yet a thread died of it.
_NEW_THREAD_DIED = "Exception ignored in thread started by"
# Verdict lines of the repro protocol (docs/DESIGN.md, repro scripts) and of its thread runner: printed
# after the tracebacks, never part of an exception message.
_VERDICT = re.compile(r"^(?:REPRODUCED:|NOT REPRODUCED|OTHER FAILURE:|WRONG_RESULT:|HANG:|SKIP:)")
# c10::Error's debug text after its message: the C++ frames of TORCH_SHOW_CPP_STACKTRACES=1
# (`Exception raised from ... (most recent call first):`, `frame #0: ...`, `C++ CapturedTraceback:`).
_CPP_DEBUG = re.compile(r"^(?:Exception raised from |C\+\+ CapturedTraceback:|frame #\d+: |#\d+ \S)")
# Inductor's compile workers send back a job's traceback as text (SubprocException,
# torch/_inductor/compile_worker/subproc_pool.py): the nested traceback is the cause.
_SUBPROC = "An exception occurred in a subprocess:"
_SUBPROC_NAME = re.compile(r"^Name=\S*\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A log record below error level: torch's glog-style `W1130 22:12:42.758000 1184 file.py:228] `
# (W, I), or logging's level name near the start of the line (`WARNING:root:`, `... INFO ...`).
_BELOW_ERROR = re.compile(r"^(?:[WI]\d{4} \d\d:\d\d:\d\d|(?:\S+ ){0,3}\[?(?:WARNING|WARN|INFO|DEBUG)\]?[: ])")
POOL_WORKER = "ThreadPoolExecutor"
"""The thread of an exception that `Future.result()` re-raised: a ThreadPoolExecutor worker (the
role of its default names `ThreadPoolExecutor-<n>_<m>`)."""


@dataclass(slots=True)
class _Open:
    """A traceback being read: its frames so far, outermost first, and each one's source line."""

    thread: str | None
    chain: tuple[PyTraceback, ...]
    indent: int
    unraisable: bool
    handled: bool
    frames: list[Frame] = dataclasses.field(default_factory=list)
    sources: list[str] = dataclasses.field(default_factory=list)


def parse_tracebacks(text: str) -> list[PyTraceback]:
    """Every Python traceback in `text`, chained blocks folded into the last one.

    Thread names come from the trainer's `=== thread <name> failed: ... ===` report or from
    threading.excepthook's `Exception in thread <name>:` (also behind a log prefix, and a log line
    right before the traceback that says `in thread <name>`); a header-less traceback whose
    outermost frame is `<module>` is the main thread's, unless it re-raises another thread's
    exception (`raise errors[0]`: thread unknown; `future.result()`: a pool worker). A header
    names only the exception printed right after it (its chain and, for an exception group, its
    members): another output line or a traceback that is not chained to it ends the header, so
    that a header-less traceback printed later (e.g. by a repro's main thread) does not inherit
    the last header's thread. Tracebacks that threads printed at the same moment, line by line
    interleaved, are read apart (see `_Reader`)."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    if "Exception Group Traceback" in text:
        lines = [_ungroup(line) for line in lines]
    return _Reader(lines).read()


class _Reader:
    """Reads tracebacks line by line. Several can be open at once: when threads fail together
    their hooks' lines interleave, so a frame line goes to the open traceback it continues (the
    one whose frames so far are a prefix of another's, as the same race gives the same stack)
    and an exception line closes the open traceback with the most frames."""

    def __init__(self, lines: list[str], *, first_only: bool = False) -> None:
        self.lines, self.first_only = lines, first_only
        self.i = 0
        self.result: list[PyTraceback] = []
        self.headers: list[str | None] = []  # each result's header thread, before _thread_of
        self.open: list[_Open] = []
        self.pending: list[str | None] = []  # headers not yet given to a traceback
        self.scope: str | None = None  # thread of the last header or traceback read
        self.chained: list[PyTraceback] = []
        self.after_block = self.in_group = False
        self.prefix = ""  # per-line prefix repeated on every line (`[rank0]: `)
        self.last: _Open | None = None  # the traceback the last frame line went to

    def read(self) -> list[PyTraceback]:
        while self.i < len(self.lines):
            if self.first_only and self.result and not self.open and not self._chain_follows():
                break
            self._step(self._line(self.i))
        return self.result

    def _line(self, i: int) -> str:
        line = self.lines[i]
        if self.prefix and line.startswith(self.prefix):
            return line[len(self.prefix) :]
        return line

    def _chain_follows(self) -> bool:
        rest = (self._line(j).strip() for j in range(self.i, len(self.lines)))
        return next((s for s in rest if s), "") in _CHAIN_LINES

    def _step(self, line: str) -> None:
        headers = _headers(line)
        if headers:
            # While tracebacks are open, other threads' headers queue up (interleaved hooks);
            # otherwise the last header line before a traceback names it (each of its threads
            # naming one of the tracebacks that follow, where several ran together).
            self.pending = [*self.pending, *headers] if self.open else headers
            self.chained, self.after_block, self.in_group = [], False, False
        elif line.strip() in _CHAIN_LINES and self.result and self.headers[-1] == self.scope:
            self.headers.pop()
            self.chained.append(self.result.pop())
        elif (start := _TB_START_AT.search(line)) is not None:
            self._open_block(line, start.start())
        elif self.open:
            if not self._frames_line(line):
                return  # the line is read again, with one block fewer
        elif self.after_block and line.strip():
            self.scope, self.after_block, self.in_group, self.pending = None, False, False, []
        self.i += 1

    def _open_block(self, line: str, at: int) -> None:
        before = line[:at]
        if before.strip():
            # A log prefix on this line only, or one repeated on every line (torchrun's).
            nxt = self.lines[self.i + 1] if self.i + 1 < len(self.lines) else ""
            self.prefix = before if nxt.startswith(before) else self.prefix
            indent = 0
        else:
            indent = len(before)
        previous = self._line(self.i - 1) if self.i > 0 else ""
        said = before if before.strip() else previous if _ERROR_WORDS.search(previous) else ""
        mention = _mention(said)
        if mention is not None and not self.pending and not self.chained:
            self.pending.append(mention)
        thread = self._thread_for_block()
        unraisable = "Exception ignored in" in previous and _NEW_THREAD_DIED not in previous
        # Only a prefix on the Traceback line itself says the level: a traceback printed right
        # after an unrelated INFO line is still an uncaught exception's.
        handled = bool(_BELOW_ERROR.match(before))
        self.open.append(
            _Open(
                thread=thread,
                chain=tuple(_flatten(self.chained)),
                indent=indent,
                unraisable=unraisable,
                handled=handled,
            )
        )
        self.chained = []

    def _thread_for_block(self) -> str | None:
        if self.pending:
            self.scope = self.pending.pop(0)
        elif self.after_block and not self.chained and not self.in_group:
            self.scope = None  # a new, unrelated traceback
        return self.scope

    def _frames_line(self, line: str) -> bool:
        """One line while tracebacks are open; False if it is to be read again."""
        frame = _TB_FRAME.search(line) if line[:1].isspace() else None  # not a message naming a file
        if frame is not None:
            self._add_frame(Frame(name=frame.group(3), filename=frame.group(1), line=int(frame.group(2))))
            return True
        block = self.open[-1]
        if not line.strip() or line.strip() == ":":
            # A bare `:` is the end of a header whose thread name ran into another header's
            # (`Exception in thread Exception in thread a-1a-2:`), printed when that hook resumed.
            return True
        if len(line) - len(line.lstrip()) > block.indent:
            self._add_source(line.strip())
            return True
        exc = _exception_line(line.strip(), strict=len(self.open) > 1)
        if exc is None:
            if len(self.open) > 1:
                return True  # a piece of another thread's output
            self.open.pop()  # not a traceback after all
            return False
        self._close(exc)
        return False  # _close moved self.i past the message

    def _add_frame(self, frame: Frame) -> None:
        target = self._continued_by(frame) or max(self.open, key=lambda b: len(b.frames))
        target.frames.append(frame)
        target.sources.append("")
        self.last = target

    def _continued_by(self, frame: Frame) -> _Open | None:
        """The earliest open traceback that `frame` continues in the way another one did."""
        for b in self.open:
            n = len(b.frames)
            if any(
                c is not b and len(c.frames) > n and c.frames[n] == frame and c.frames[:n] == b.frames
                for c in self.open
            ):
                return b
        return None

    def _add_source(self, text: str) -> None:
        last = self.last
        if last is not None and last.frames and not last.sources[-1] and not set(text) <= set("^~ "):
            last.sources[-1] = text

    def _close(self, exc: re.Match) -> None:
        block = max(self.open, key=lambda b: len(b.frames))
        self.open.remove(block)
        message, chain = self._message(exc)
        frames = tuple(reversed(block.frames))
        sources = tuple(reversed(block.sources))
        tb = PyTraceback(
            thread=_thread_of(block.thread, frames, sources),
            frames=frames,
            sources=sources,
            exc_type=exc.group(1),
            message=message,
            chain=block.chain + chain,
            unraisable=block.unraisable,
            handled=block.handled,
        )
        self.result.append(tb)
        self.headers.append(block.thread)
        self.scope = block.thread
        self.after_block = True
        self.in_group = self.in_group or tb.short_type in ("ExceptionGroup", "BaseExceptionGroup")

    def _message(self, exc: re.Match) -> tuple[str, tuple[PyTraceback, ...]]:
        """The exception line's message and the lines that continue it; self.i moves past them.
        A bare `AssertionError` line means str(exc) == "": Python prints `Type: msg` whenever the
        message is not empty, so the next line is other output, not a continuation."""
        message = [exc.group(2) or ""]
        self.i += 1
        while exc.group(2) is not None and self.i < len(self.lines):
            line = self._line(self.i)
            if (
                not line.strip()
                or _starts_something(line)
                or _CPP_DEBUG.match(line)
                or (self.open and (line[:1].isspace() or _TB_FRAME.search(line)))
            ):
                break
            message.append(line)
            self.i += 1
        if message[0].rstrip().endswith(_SUBPROC):
            nested = self._subprocess_traceback()
            if nested is not None:
                first = nested.message.splitlines()[:1]
                message.append(f"{nested.exc_type}: {first[0] if first else ''}".rstrip())
                return "\n".join(message).strip(), (*nested.chain, nested)
        return "\n".join(message).strip(), ()

    def _subprocess_traceback(self) -> PyTraceback | None:
        """The job's traceback that a SubprocException carries after `Name=<kernel>`."""
        j = self.i
        while j < len(self.lines) and (not self._line(j).strip() or _SUBPROC_NAME.match(self._line(j))):
            j += 1
        if j >= len(self.lines) or not _TB_START_AT.search(self._line(j)):
            return None
        nested = _Reader(self.lines[j:], first_only=True)
        found = nested.read()
        if not found:
            return None
        self.i = j + nested.i
        return found[-1]


def _exception_line(text: str, *, strict: bool) -> re.Match | None:
    """`Type: message` or a bare `Type`; `strict` (tracebacks interleaved, so pieces of source
    lines reach column 0): a bare name only if it is named like an exception."""
    exc = _LIKELY_EXC_LINE.match(text) or _EXC_LINE.match(text)
    if exc is not None and strict and exc.group(2) is None and not _LIKELY_EXC_LINE.match(text):
        return None
    return exc


def _headers(line: str) -> list[str]:
    """The threads a header line names, in order; [] if it is not a header. Excepthooks that
    print at once can run their headers together on one line, the names too:
    `Exception in thread Exception in thread request-2request-1:` is two threads of one role
    (user_f2_thread_subclass.py, 1 of 4 runs under `harness stress -p 2`)."""
    report = _REPORT_HEADER.match(line)
    if report:
        return [report.group(1)]
    at = line.rfind(_HOOK_HEADER)
    if at < 0:
        return []
    # Interleaved tracebacks can put another thread's caret markers (Python 3.11's `^^^~~~`)
    # between the header and its name: the name starts after them.
    rest = line[at + len(_HOOK_HEADER) :]
    name = _THREAD_NAME.match(line, len(line) - len(rest.lstrip("^~")))
    if name is None:
        return []
    return _run_together(name.group(0), line.count(_HOOK_HEADER))


def _run_together(names: str, count: int) -> list[str]:
    """`count` names printed with nothing between them, split where they repeat one role
    (`request-2request-1` -> `request-2`, `request-1`); unsplittable text stays one name."""
    if count > 1:
        runs = re.fullmatch(rf"(?P<role>[^\s:]+?[-_])\d+(?:(?P=role)\d+){{{count - 1}}}", names)
        if runs:
            return re.findall(rf"{re.escape(runs.group('role'))}\d+", names)
    return [names]


def _header(line: str) -> str | None:
    """The thread a header line names (the last, where several ran together); None if none."""
    names = _headers(line)
    return names[-1] if names else None


def _mention(line: str) -> str | None:
    found = list(_THREAD_MENTION.finditer(line))
    return found[-1].group(1) if found else None


@dataclass(kw_only=True, slots=True, frozen=True)
class Reraise:
    """Where another thread re-raised an exception: `frames[:cut]` (innermost first) ran in the
    thread that raised it, of which only the pool's role is known (None: not in the output)."""

    cut: int
    thread: str | None


def reraise_of(frames: tuple[Frame, ...], sources: tuple[str, ...]) -> Reraise | None:
    """The innermost re-raise boundary in a traceback: a ThreadPoolExecutor job's `run` (pool) or
    a `raise` of a kept exception in the user's code."""
    return _pool_reraise(frames) or _user_reraise(frames, sources)


def _thread_of(thread: str | None, frames: tuple[Frame, ...], sources: tuple[str, ...]) -> str | None:
    """The thread a traceback was raised in: a re-raised one's (see `reraise_of`) whichever thread
    printed it; else the header's; else, from `<module>`, the main thread's."""
    reraise = reraise_of(frames, sources)
    if reraise is not None:
        return reraise.thread
    if thread is None and frames and frames[-1].name == "<module>":
        return "MainThread"
    return thread


def _pool_reraise(frames: tuple[Frame, ...]) -> Reraise | None:
    """A ThreadPoolExecutor job's `run` reached from anything but the pool's own loop (`_worker`):
    re-raised by `future.result()` (`__get_result`, `pool.map`) or asyncio's `run_in_executor`.
    None where torch itself waited (Inductor's compile pool): then the thread that called torch
    is the one that failed."""
    ids = [frame_id(f) for f in frames]
    for k in range(len(ids) - 1):
        if ids[k] != "concurrent.futures.thread:run" or ids[k + 1] == "concurrent.futures.thread:_worker":
            continue
        outer = [module_of(f.filename) for f in frames[k + 1 :]]
        caller = next(
            (f for f, m in zip(frames[k + 1 :], outer) if not m.startswith(("concurrent.", "asyncio."))), None
        )
        if caller is not None and is_torch(caller):
            return None
        # asyncio's default executor names its threads `asyncio_<n>`.
        return Reraise(cut=k + 1, thread="asyncio" if any(m.startswith("asyncio.") for m in outer) else POOL_WORKER)
    return None


def _user_reraise(frames: tuple[Frame, ...], sources: tuple[str, ...]) -> Reraise | None:
    """A frame of the user's own code, not the innermost, whose line is `raise <exc>` of an
    exception that already had frames (`raise errors[0]`, a thread class's `join` raising
    `self.exc`). Re-raising in the same function (`except E as e: ...; raise e`) is not one:
    Python then prints that function's frame twice, so the next frame inward is the same."""
    for k in range(1, min(len(frames), len(sources))):
        f, inner = frames[k], frames[k - 1]
        if (
            sources[k].startswith("raise ")
            and not is_library(f)
            and (inner.filename, inner.name) != (f.filename, f.name)
        ):
            return Reraise(cut=k, thread=None)
    return None


_GROUP_RULE = re.compile(r"^\s*\+[-+]")
_GROUP_PREFIX = re.compile(r"^\s*[|+] ?")


def _ungroup(line: str) -> str:
    """Drop the `| ` / `+-+---- 1 ----` drawing of an ExceptionGroup traceback (PEP 654), so
    that its members parse as ordinary tracebacks."""
    if _GROUP_RULE.match(line):
        return ""
    line = _GROUP_PREFIX.sub("", line, count=1)
    return line.replace("Exception Group Traceback (most recent", "Traceback (most recent")


def _flatten(chained: list[PyTraceback]) -> Iterable[PyTraceback]:
    for tb in chained:
        yield from tb.chain
        yield dataclasses.replace(tb, chain=())


_LOG_RECORD = re.compile(
    r"^(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ])"
)
"""A line that opens a log record (logging's default and usual formats, glog's): the next record, never
the message of the exception above it (a pool's logged failures would otherwise each carry the next
record's text, and the same failure would read as another in every run)."""


def _starts_something(line: str) -> bool:
    stripped = line.strip()
    return (
        stripped == _TB_START
        or _LOG_RECORD.match(line) is not None
        or stripped in _CHAIN_LINES
        or _header(line) is not None
        or line.startswith("Fatal Python error")
        or bool(_VERDICT.match(line))
        or _TB_START_AT.search(line) is not None
    )


def first_failure(tracebacks: list[PyTraceback]) -> PyTraceback | None:
    """The first traceback of a thread that failed on its own: not a consequence of another
    thread's failure, nor an exception ignored by a finaliser (v5) or logged as a warning (v7)."""
    return next(
        (tb for tb in tracebacks if tb.short_type not in SECONDARY_TYPES and not tb.unraisable and not tb.handled), None
    )


def primary_traceback(tracebacks: list[PyTraceback]) -> PyTraceback | None:
    """`first_failure`; failing that, the first traceback."""
    return first_failure(tracebacks) or (tracebacks[0] if tracebacks else None)


# An exception printed without its traceback (`logging.error("%s: %s", type(e).__name__, e)`,
# `print(repr(e))`), possibly behind a log prefix.
_BARE_EXC = re.compile(rf"(?:^|[\s:\]|(])({_EXC_NAME}): (\S.*)$")


def bare_exception(text: str, *, known_only: bool = False) -> PyTraceback | None:
    """The first failure printed without a traceback: the first line with a known torch message,
    else (unless `known_only`) the first `SomeError: message` line that is not a secondary
    exception, with the lines that continue its message. The thread is that of a header on the
    line or the line before."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    known = (i for i, line in enumerate(lines) if any(re.search(p, line) for _, p in KNOWN_MESSAGES))
    bare = (
        i
        for i, line in enumerate(lines)
        if (m := _BARE_EXC.search(line)) and m.group(1).rsplit(".", 1)[-1] not in SECONDARY_TYPES
    )
    i = next(known, None)
    i = next(bare, None) if i is None and not known_only else i
    if i is None:
        return None
    m = _BARE_EXC.search(lines[i])
    exc_type, first = (m.group(1), m.group(2)) if m else ("", lines[i].strip())
    message = [first.removesuffix(" ===")]
    for line in lines[i + 1 :]:
        if not line.strip() or _starts_something(line) or _CPP_DEBUG.match(line):
            break
        message.append(line)
    thread = _header(lines[i]) or (_header(lines[i - 1]) if i else None)
    return PyTraceback(thread=thread, frames=(), exc_type=exc_type, message="\n".join(message).strip())
