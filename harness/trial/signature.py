"""Failure signatures: which trials failed the same way.

A signature is ClusterFuzz's crash state (type + top 3 frames after an ignore list, no line
numbers, `MAX_CRASH_STATE_FRAMES = 3`) plus Hypothesis's `InterestingOrigin` idea that the thread
and the path into the library matter, plus Sentry's message normalisation (placeholders for
addresses, numbers, paths, uuids). What goes into the key depends on the kind:

| kind         | key                                                                          |
|--------------|------------------------------------------------------------------------------|
| exception    | type, normalised message, thread role, top 3 frames, torch entry frame       |
| known        | the entry of KNOWN_MESSAGES only (one torch invariant, many call paths)      |
| cuda         | the CUDA error string (`operation not permitted when stream is capturing`)   |
| fatal        | `Fatal Python error: <kind>` or C++ `what()`, + first frame of the crashing  |
|              | thread in the faulthandler dump, + whether that thread was garbage-collecting|
| signal       | the signal name (killed without a fatal-error report, e.g. SIGKILL by OOM)  |
| hang         | sorted set of (thread role, innermost meaningful frame) of the dumped threads|
| wrong_result | the normalised `WRONG_RESULT:` reason                                        |
| exit         | exit status + normalised last output line (non-zero, nothing else to go on)  |

The "torch entry frame" (outermost torch frame) separates one error reached from a forward from
the same error reached from a backward on the autograd thread (the CUDAGraph-Trees TLS
AssertionError, pytorch/pytorch#123177, has an empty message and the same innermost frames).

Versioned (Sentry grouping versions): changing what goes into a key must bump
SIGNATURE_VERSION, since old and new keys stop matching (ClusterFuzz #3488). Still 1 after the
parsing fixes made for the H200 GPU outputs (bare exception lines, header scope, verdict lines,
garbage-collecting crashes, the mempool message): no key of the CPU fixtures or stored runs moved.
2 (H200 trainer hang, 2026-11-29): hang keys name the nameless autograd device thread
`autograd-device` and leave out helper threads (tqdm's monitor, Inductor's subprocess reader).
3 (same day): `=== ... ===` report banners after a one-line message are no longer part of it (one
IndexError had split into 3 keys by which threads the trainer reported alive afterwards).
4 (H200 campaign, same day): a native crash while garbage-collecting is keyed without its Python
frame. The frame is only the allocation that triggered the collection: 7 such segfaults of the
campaign split into 6 keys by it (pytree's helper, a Dynamo variable's __init__, linecache, ...,
tests/fixtures/tracebacks/gpu_segv_during_gc).
5 (2026-11-30): a native crash after a thread's Python exception is keyed by that exception, the
first failure (ClusterFuzz keys a crash by its first report); the crash is shown as `then ...`.
Three campaign GC segfaults had followed out-of-memory (2, now RESOURCE) or F1c (1).
6 (same day): a frame in Inductor's generated code is `<inductor-output>`, not the module named by
the hash of that code: one compiler bug had two keys, one per compiled graph (gpu-shape2).
7 (2026-12-02, programs written outside this project, tests/scripts/user_*.py): one F2 crash had
two keys, role `Exception in thread caller` and `caller`, because two threads' excepthooks printed
at once, line by line interleaved; such tracebacks are now read apart. Also read: a traceback
behind a log prefix (`ERROR:root:...`, torchrun's `[rank0]: ` on every line), a header anywhere on
a line (`logging.exception`, a user's own `Exception in thread <name>`), a log line before the
traceback naming the thread, an exception printed without traceback (was `exit 1` + the last
line, e.g. a line of the error's debug text). Keyed differently: an exception another thread
re-raised by the raising thread's frames only, and its role: a pool worker's for `future.result()`
and asyncio's `to_thread`, unknown for `raise errors[0]` of a kept exception (both were MainThread
with the main thread's frames); SubprocException by the job's own exception; c10's C++ frames are
not message; a traceback logged as a warning is not a failure; a known message printed before a
native crash keys it as a first failure. The cudagraph-pool check (`... not tracked as outputs`) is
a known message: 14 stored F1c failures of 3 paths and 2 programs had 6 keys. No other stored
failure changed summary or grouping (`harness resign`, every store with artefacts).
Still 7 after reading headers that ran together (`Exception in thread Exception in thread
request-2request-1request-0:`, each hook's `:` printed later on a line of its own): the three
tracebacks had been read as one, with every frame (f2_fx_trace_of_compiled_fn/10.txt); the 875
stored v7 failures with artefacts keep their keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import signal
from dataclasses import dataclass
from typing import Iterable

from harness.trial.hangs import Frame, ThreadStack, parse_faulthandler

SIGNATURE_VERSION = 7
MAX_FRAMES = 3
MESSAGE_CAP = 120

# Known torch messages keyed on the message, not the path: each is one invariant of torch that
# many call sites reach, so the path would split one bug into many signatures.
KNOWN_MESSAGES: tuple[tuple[str, str], ...] = (
    # cudagraph trees: an output was read after a later replay overwrote it.
    ("cudagraphs-output-overwritten",
     r"accessing tensor output of CUDAGraphs that has been overwritten"),
    # F2 / R1: another thread is inside FX tracing (global _is_fx_tracing_flag, #126024).
    ("fx-trace-of-dynamo-fn",
     r"Detected that you are using FX to symbolically trace a dynamo-optimized function"),
    # F3 / R3: global CURRENT_PATCHER; raised bare or wrapped in InductorError /
    # BackendCompilerFailed (#168042, PR #187589).
    ("fx-current-patcher",
     r"CURRENT_PATCHER (?:is None in finally block|was changed during a revert_all_patches)"),
    # R4: another thread's tracer patched nn.Module.__call__ (PR #187589).
    ("fx-module-not-submodule", r"module is not installed as a submodule"),
    # R6: a concurrent torch._dynamo.reset() removed the compiled fn's global.
    ("dynamo-compiled-fn-missing", r"name '__compiled_fn_\w*' is not defined"),
    # F1d: concurrent captures sharing a generator (#172390).
    ("cuda-rng-offset-outside-capture",
     r"Offset increment outside graph capture encountered unexpectedly"),
    # F9: checkpoint + cudagraphs (#154306).
    ("cudagraph-input-deallocated",
     r"graph recording observed an input tensor deallocate"),
    # F1c: a second thread starts recording into a cudagraph-trees mempool that another thread is
    # recording to; reached from the forward recording (`_allocate_and_copy_recording_inputs`)
    # and from the backward warm-up (`run_eager`) alike (H200 runs, torch 2.11).
    ("cudagraph-mempool-already-recording",
     r"beginAllocateToPool: already recording to mempool_id"),
    # F1c: the recording's check that the pool holds only the graph's live storages found another
    # thread's allocation in it (check_memory_pool); reached from a recording's __init__, from
    # _add_first_outputs and from run_eager, in the trainer and in r04 alike (H200 runs, 2.11).
    ("cudagraph-pool-not-tracked",
     r"tensor\(s\) in the cudagraph pool not tracked as outputs"),
)

# Exceptions that follow another thread's failure (stop requests, broken barriers); the first
# other exception in the output is the cause.
SECONDARY_TYPES = frozenset({
    "StageStopped", "BrokenBarrierError", "KeyboardInterrupt", "SystemExit", "ChannelClosed",
    "ExceptionGroup", "BaseExceptionGroup",      # containers: their first member is the cause
})

# Plumbing frames dropped before taking the top frames (ClusterFuzz STACK_FRAME_IGNORE_REGEXES).
IGNORED_MODULES = (
    "threading", "queue", "subprocess", "concurrent.futures", "runpy", "contextlib",
    "functools", "importlib", "selectors", "multiprocessing", "sitecustomize",
    "harness.trial.bootstrap", "harness.faults", "dflash.faults",
    "harness.bootstrap", "harness.scheduler", "harness.points",   # their paths in outputs stored before
    "torch.utils._contextlib",
)
IGNORED_FRAMES = frozenset({
    ("torch.nn.modules.module", "_call_impl"),
    ("torch.nn.modules.module", "_wrapped_call_impl"),
})


@dataclass(kw_only=True, slots=True, frozen=True)
class Signature:
    kind: str
    exc_type: str = ""
    message: str = ""
    role: str = ""
    frames: tuple[str, ...] = ()
    keyed: tuple[str, ...] = ()
    """The parts that identify the failure (hashed into `key`); the rest is for display."""
    then: str = ""
    """What the failure led to (a native crash after a thread's exception); display only."""
    version: int = SIGNATURE_VERSION

    @property
    def key(self) -> str:
        blob = json.dumps([self.version, self.kind, *self.keyed]).encode()
        digest = hashlib.sha1(blob).hexdigest()[:10]
        label = self.message if self.kind in ("known", "cuda") else self.exc_type or self.kind
        prefix = re.sub(r"[^A-Za-z0-9]+", "-", label.rsplit(".", 1)[-1]).strip("-")[:40]
        return f"{prefix or self.kind}-{digest}"

    @property
    def summary(self) -> str:
        text = self._summary()
        return f"{text}; then {self.then}" if self.then else text

    def _summary(self) -> str:
        where = " < ".join(self.frames) or "?"
        if self.kind == "hang":
            return f"hang: {', '.join(self.frames) or 'no Python threads'}"
        if self.kind in ("known", "cuda"):
            who = " ".join(filter(None, (self.exc_type, "in", self.role or "?")))
            return f"{self.message} ({who} at {where})"
        if self.kind == "exception":
            text = f"{self.exc_type} in {self.role or '?'} at {where}"
            return f"{text}: {self.message}" if self.message else f"{text} (empty message)"
        if self.kind == "fatal":
            at = f" at {where}" if self.frames or "during garbage collection" not in self.message else ""
            return f"{self.exc_type}{at}" + (f": {self.message}" if self.message else "")
        return f"{self.exc_type}: {self.message}" if self.message else self.exc_type

    def __str__(self) -> str:
        return f"{self.key} {self.summary}"


@dataclass(kw_only=True, slots=True, frozen=True)
class PyTraceback:
    """One printed traceback block; `frames` innermost first, `chain` = earlier blocks it
    was raised from (`During handling ...` / `The above exception was the direct cause ...`)."""

    thread: str | None
    frames: tuple[Frame, ...]
    exc_type: str
    message: str
    chain: tuple["PyTraceback", ...] = ()
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
        return self.frames[:reraise.cut] if reraise is not None else self.frames

    def all_text(self) -> str:
        parts = [f"{t.exc_type}: {t.message}" for t in (*self.chain, self)]
        return "\n".join(parts)


# ---------------------------------------------------------------------------------- normalising

_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r) for p, r in (
        (r"__compiled_fn_\d+(?:_[0-9a-fA-F]+)*", "__compiled_fn_<N>"),
        (r"\b[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_]"
         r"[0-9a-fA-F]{12}\b", "<uuid>"),
        (r"0x[0-9a-fA-F]+", "<hex>"),
        (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}\b", "<hash>"),
        (r"(?:[A-Za-z]:)?(?:/[\w.+@-]+){2,}/?", "<path>"),
        (r"\b\d+\.\d+(?:[eE][-+]?\d+)?\b", "<float>"),
        (r"\b\d+\b", "<int>"),
        (r"\s+", " "),
    ))


_BANNER = re.compile(r"^=== .* ===$")


def normalise_message(message: str) -> str:
    """First 2 non-empty lines (Sentry), placeholders for event-specific values, capped.
    `=== ... ===` banners (the trainer's per-thread reports, printed right after a traceback)
    are not part of any message."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not _BANNER.match(ln.strip())][:2]
    text = " | ".join(lines)
    for pattern, repl in _NORMALISERS:
        text = pattern.sub(repl, text)
    text = text.strip()
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP - 3] + "..."


def thread_role(name: str | None) -> str:
    """`dflash-train-1` -> `dflash-train`, `Dummy-5` -> `Dummy`, `Thread-3 (work)` -> `Thread
    (work)`; faulthandler's nameless `Thread 0x...` -> `?`."""
    if not name or re.fullmatch(r"Thread 0x[0-9a-fA-F]+", name):
        return "?"
    name = re.sub(r"^Thread-\d+", "Thread", name)
    return re.sub(r"(?:[-_ ]?\d+)+$", "", name) or name


_MODULE_ANCHORS = (re.compile(r"(?:site-packages|dist-packages)/(.*)$"),
                   re.compile(r"lib/python\d+\.\d+/(.*)$"))
_PROJECT_ROOTS = ("dflash", "harness", "repro", "torch")


# Inductor's generated wrapper modules live in its code cache as `<cache>/xx/c<51 chars>.py`, named by
# a hash of the generated source: one graph recompiled for other shapes, or under another torch or
# config, gets another name (the mix-order failure split into two keys by it, results/gpu-shape2).
_INDUCTOR_OUTPUT = re.compile(r"(?:^|/)c[a-z0-9]{51}\.py$")
INDUCTOR_OUTPUT = "<inductor-output>"


def module_of(filename: str) -> str:
    """Dotted module for a frame's file, independent of where the tree lives."""
    path = filename.replace("\\", "/")
    if _INDUCTOR_OUTPUT.search(path):
        return INDUCTOR_OUTPUT
    anchored = next((m for m in (a.search(path) for a in _MODULE_ANCHORS) if m), None)
    if anchored:
        rel = anchored.group(1)
    else:
        parts = path.split("/")
        roots = [i for i, p in enumerate(parts[:-1]) if p in _PROJECT_ROOTS]
        rel = "/".join(parts[roots[-1]:]) if roots else parts[-1]
    rel = re.sub(r"\.py$", "", rel).replace("/", ".")
    return re.sub(r"\.__init__$", "", rel)


def frame_id(frame: Frame) -> str:
    """`module:function`; qualified names are cut to the function so that py-spy
    (`Thread.run`), faulthandler and tracebacks (`run`) agree."""
    return f"{module_of(frame.filename)}:{frame.name.rsplit('.', 1)[-1]}"


def is_meaningful(frame: Frame) -> bool:
    if not frame.is_python or frame.filename.startswith("<frozen"):
        return False
    module = module_of(frame.filename)
    func = frame.name.rsplit(".", 1)[-1]
    if (module, func) in IGNORED_FRAMES:
        return False
    return not any(module == m or module.startswith(m + ".") for m in IGNORED_MODULES)


def top_frames(frames: Iterable[Frame], limit: int = MAX_FRAMES) -> tuple[str, ...]:
    return tuple(frame_id(f) for f in frames if is_meaningful(f))[:limit]


def torch_entry(frames: tuple[Frame, ...]) -> str | None:
    """Outermost meaningful torch frame: where the caller entered torch."""
    for frame in reversed(frames):
        module = module_of(frame.filename)
        if is_meaningful(frame) and (module == "torch" or module.startswith("torch.")):
            return frame_id(frame)
    return None


# ------------------------------------------------------------------------------------- parsing

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
_EXC_NAME = (r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Failed|Interrupt|Exit|Group"
             r"|Stopped|Closed)|c10::\w+")
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
# Verdict lines of the repro protocol (docs/DESIGN.md section 3) and of its thread runner: printed
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
        self.headers: list[str | None] = []     # each result's header thread, before _thread_of
        self.open: list[_Open] = []
        self.pending: list[str | None] = []     # headers not yet given to a traceback
        self.scope: str | None = None           # thread of the last header or traceback read
        self.chained: list[PyTraceback] = []
        self.after_block = self.in_group = False
        self.prefix = ""                        # per-line prefix repeated on every line (`[rank0]: `)
        self.last: _Open | None = None          # the traceback the last frame line went to

    def read(self) -> list[PyTraceback]:
        while self.i < len(self.lines):
            if self.first_only and self.result and not self.open and not self._chain_follows():
                break
            self._step(self._line(self.i))
        return self.result

    def _line(self, i: int) -> str:
        line = self.lines[i]
        if self.prefix and line.startswith(self.prefix):
            return line[len(self.prefix):]
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
                return                          # the line is read again, with one block fewer
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
        self.open.append(_Open(thread=thread, chain=tuple(_flatten(self.chained)), indent=indent,
                               unraisable=unraisable, handled=handled))
        self.chained = []

    def _thread_for_block(self) -> str | None:
        if self.pending:
            self.scope = self.pending.pop(0)
        elif self.after_block and not self.chained and not self.in_group:
            self.scope = None                   # a new, unrelated traceback
        return self.scope

    def _frames_line(self, line: str) -> bool:
        """One line while tracebacks are open; False if it is to be read again."""
        frame = _TB_FRAME.search(line) if line[:1].isspace() else None   # not a message naming a file
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
                return True                     # a piece of another thread's output
            self.open.pop()                     # not a traceback after all
            return False
        self._close(exc)
        return False                            # _close moved self.i past the message

    def _add_frame(self, frame: Frame) -> None:
        target = self._continued_by(frame) or max(self.open, key=lambda b: len(b.frames))
        target.frames.append(frame)
        target.sources.append("")
        self.last = target

    def _continued_by(self, frame: Frame) -> _Open | None:
        """The earliest open traceback that `frame` continues in the way another one did."""
        for b in self.open:
            n = len(b.frames)
            if any(c is not b and len(c.frames) > n and c.frames[n] == frame and c.frames[:n] == b.frames
                   for c in self.open):
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
        tb = PyTraceback(thread=_thread_of(block.thread, frames, sources), frames=frames,
                         sources=sources, exc_type=exc.group(1), message=message,
                         chain=block.chain + chain, unraisable=block.unraisable, handled=block.handled)
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
            if not line.strip() or _starts_something(line) or _CPP_DEBUG.match(line) or (
                    self.open and (line[:1].isspace() or _TB_FRAME.search(line))):
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
    name = _THREAD_NAME.match(line, at + len(_HOOK_HEADER)) if at >= 0 else None
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
        outer = [module_of(f.filename) for f in frames[k + 1:]]
        caller = next((f for f, m in zip(frames[k + 1:], outer) if not m.startswith(("concurrent.", "asyncio."))), None)
        if caller is not None and _is_torch(caller):
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
        if (sources[k].startswith("raise ") and not _is_library(f)
                and (inner.filename, inner.name) != (f.filename, f.name)):
            return Reraise(cut=k, thread=None)
    return None


def _is_torch(frame: Frame) -> bool:
    module = module_of(frame.filename)
    return module == "torch" or module.startswith("torch.")


def _is_library(frame: Frame) -> bool:
    path = frame.filename.replace("\\", "/")
    return (path.startswith("<frozen") or "/site-packages/" in path or "/dist-packages/" in path
            or re.search(r"/lib/python\d+\.\d+/", path) is not None)


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


def _starts_something(line: str) -> bool:
    stripped = line.strip()
    return (stripped == _TB_START or stripped in _CHAIN_LINES or _header(line) is not None
            or line.startswith("Fatal Python error") or bool(_VERDICT.match(line))
            or _TB_START_AT.search(line) is not None)


def first_failure(tracebacks: list[PyTraceback]) -> PyTraceback | None:
    """The first traceback of a thread that failed on its own: not a consequence of another
    thread's failure, nor an exception ignored by a finaliser (v5) or logged as a warning (v7)."""
    return next((tb for tb in tracebacks if tb.short_type not in SECONDARY_TYPES
                 and not tb.unraisable and not tb.handled), None)


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
    bare = (i for i, line in enumerate(lines) if (m := _BARE_EXC.search(line))
            and m.group(1).rsplit(".", 1)[-1] not in SECONDARY_TYPES)
    i = next(known, None)
    i = next(bare, None) if i is None and not known_only else i
    if i is None:
        return None
    m = _BARE_EXC.search(lines[i])
    exc_type, first = (m.group(1), m.group(2)) if m else ("", lines[i].strip())
    message = [first.removesuffix(" ===")]
    for line in lines[i + 1:]:
        if not line.strip() or _starts_something(line) or _CPP_DEBUG.match(line):
            break
        message.append(line)
    thread = _header(lines[i]) or (_header(lines[i - 1]) if i else None)
    return PyTraceback(thread=thread, frames=(), exc_type=exc_type, message="\n".join(message).strip())


# ---------------------------------------------------------------------------------- signatures

_FATAL = re.compile(r"Fatal Python error: ([^\n]+?)[ \t]*$", re.M)
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(.+)$", re.M)
_CUDA = re.compile(r"CUDA error: ([^\n]+)")
_WRONG = re.compile(r"^WRONG_RESULT: ?(.*)$", re.M)
# faulthandler's marker that the crashing thread was running the garbage collector.
_IN_GC = re.compile(r"^Current thread 0x[0-9a-fA-F]+(?: \[[^\]]*\])? \(most recent call first\):"
                    r"\n[ \t]+Garbage-collecting[ \t]*$", re.M)


def crash_signature(text: str, *, rc: int | None = None) -> Signature | None:
    """Signature of a run that ended badly, from its combined output and exit status.

    A native crash keys the run unless a thread had already failed with a Python exception
    before it (v5): then that first failure is the cause and the crash its aftermath, shown as
    `then <crash>` but not keyed. Three of the H200 campaign's seven segfaults during garbage
    collection came after the trainer's threads had died of out-of-memory (2) or F1c (1)."""
    native = _native_signature(text)
    if native is not None:
        before = text[:_native_start(text)]
        earlier = first_failure(parse_tracebacks(before)) or bare_exception(before, known_only=True)
        if earlier is not None:
            return dataclasses.replace(exception_signature(earlier), then=native.summary)
        return native
    if rc is not None and rc < 0:
        name = _signal_name(-rc)
        return Signature(kind="signal", exc_type=name, keyed=(name,))
    tb = primary_traceback(parse_tracebacks(text))
    if tb is None and rc:
        tb = bare_exception(text)
    if tb is not None:
        return exception_signature(tb)
    if rc:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        msg = normalise_message(last)
        return Signature(kind="exit", exc_type=f"exit {rc}", message=msg, keyed=(str(rc), msg))
    return None


def exception_signature(tb: PyTraceback) -> Signature:
    role = thread_role(tb.thread) if tb.thread else ""
    frames = top_frames(tb.origin_frames)
    base = dict(exc_type=tb.exc_type, role=role, frames=frames)
    text = tb.all_text()
    for name, pattern in KNOWN_MESSAGES:
        if re.search(pattern, text):
            shown = _raised_with(tb, pattern)
            base.update(exc_type=shown.exc_type, frames=top_frames(shown.origin_frames))
            return Signature(kind="known", message=name, keyed=(name,), **base)
    cuda = _CUDA.search(text)
    if cuda:
        msg = normalise_message(cuda.group(1))
        return Signature(kind="cuda", message=msg, keyed=(msg,), **base)
    msg = normalise_message(tb.message)
    entry = torch_entry(tb.origin_frames)
    keyed = (tb.exc_type, msg, role, *frames, f"entry={entry}")
    return Signature(kind="exception", message=msg, keyed=keyed, **base)


def _raised_with(tb: PyTraceback, pattern: str) -> PyTraceback:
    """The traceback to show for a known message: `tb`, or, when only a cause in its chain has the
    message (a user's `raise StepFailed(...) from exc`), the last such cause: where torch raised it."""
    if re.search(pattern, f"{tb.exc_type}: {tb.message}"):
        return tb
    return next((c for c in reversed(tb.chain) if re.search(pattern, f"{c.exc_type}: {c.message}")), tb)


def _native_start(text: str) -> int:
    """Where the native crash report starts (`Fatal Python error` or C++'s terminate message)."""
    starts = [m.start() for m in (_FATAL.search(text), _TERMINATE.search(text)) if m]
    return min(starts) if starts else len(text)


def _native_signature(text: str) -> Signature | None:
    fatal = _FATAL.search(text)
    thrown = _TERMINATE.search(text)
    if fatal is None and thrown is None:
        return None
    what = _WHAT.search(text) if thrown else None
    message = normalise_message(what.group(1)) if what else ""
    cuda = _CUDA.search(what.group(1)) if what else None
    if cuda:
        msg = normalise_message(cuda.group(1))
        return Signature(kind="cuda", exc_type=thrown.group(1), message=msg, keyed=(msg,))
    kind = fatal.group(1) if fatal else thrown.group(1)
    start = fatal.start() if fatal else thrown.start()
    current = [t for t in parse_faulthandler(text[start:]) if t.status == "current"]
    frames = top_frames(current[0].frames, limit=1) if current else ()
    if _IN_GC.search(text, start):
        # Crashed while collecting (a finaliser, e.g. of CUDA graph state): the Python frame is
        # only the allocation that started the collection, anywhere in the program, so it stays
        # out of the key (v4); a crash in a frame's own code has no GC marker and keeps its frame.
        message = "; ".join(filter(None, (message, "during garbage collection")))
        frames = ()
    exc_type = kind if not thrown else thrown.group(1)
    return Signature(kind="fatal", exc_type=exc_type, message=message, frames=frames,
                     keyed=(exc_type, message, *frames))


HELPER_ROLES = frozenset({"tqdm_monitor", "InductorSubproc"})
"""Threads that idle in their own loop in every dump (a progress bar's monitor, Inductor's reader
of compile-subprocess replies): in a key they only make one hang look like two, by whether a
progress bar or a compile pool happened to exist. The thread waiting on them shows the hang."""

AUTOGRAD_DEVICE_FRAMES = ("torch::autograd::Engine::thread_init",
                          "torch::autograd::python::PythonEngine::thread_init")


def hang_role(t: ThreadStack) -> str:
    """thread_role, except that the autograd engine's device thread (no Python name; py-spy
    --native shows its C++ entry) is `autograd-device`: F8 and G2 hangs sit on that thread."""
    role = thread_role(t.name)
    if role == "?" and any(f.name in AUTOGRAD_DEVICE_FRAMES for f in t.frames):
        return "autograd-device"
    return role


def in_hang_key(t: ThreadStack) -> bool:
    """Whether a dumped thread takes part in a hang key: a Python thread that is neither the
    harness's own (`harness-*`) nor one of HELPER_ROLES. Report excerpts show the same threads."""
    role = hang_role(t)
    return not role.startswith("harness") and role not in HELPER_ROLES and any(f.is_python for f in t.frames)


def hang_signature(threads: Iterable[ThreadStack]) -> Signature:
    """Sorted set of (role, innermost meaningful frame) over the threads `in_hang_key`."""
    pairs = set()
    for t in threads:
        if not in_hang_key(t):
            continue
        role = hang_role(t)
        frames = top_frames(t.frames, limit=1)
        if not frames:                      # only plumbing (e.g. a bare Timer): keep its top
            frames = (frame_id(next(f for f in t.frames if f.is_python)),)
        pairs.add(f"{role}@{frames[0]}")
    ordered = tuple(sorted(pairs))
    return Signature(kind="hang", exc_type="hang", frames=ordered, keyed=ordered)


def wrong_result_signature(text: str, *, rc: int | None = None) -> Signature:
    found = _WRONG.findall(text)
    msg = normalise_message(found[-1]) if found else f"exit {rc}"
    return Signature(kind="wrong_result", exc_type="WRONG_RESULT", message=msg, keyed=(msg,))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
