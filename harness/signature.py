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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import signal
from dataclasses import dataclass
from typing import Iterable

from harness.hangs import Frame, ThreadStack, parse_faulthandler

SIGNATURE_VERSION = 6
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
    "harness.bootstrap", "harness.scheduler", "harness.points", "dflash.faults",
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
            return f"{self.message} ({self.exc_type} in {self.role or '?'} at {where})"
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
    unraisable: bool = False
    """Printed under `Exception ignored in ...` (sys.unraisablehook: a finaliser's or GC's
    exception, which failed nothing), not by a failing thread."""

    @property
    def short_type(self) -> str:
        return self.exc_type.rsplit(".", 1)[-1]

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
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_TB_FRAME = re.compile(r'^\s+File "(.*)", line (\d+), in (.*)$')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
# Only the start: a multi-line message spreads the header over several lines.
_REPORT_HEADER = re.compile(r"^=== thread (\S+) failed: ")
_HOOK_HEADER = re.compile(r"^Exception in thread (.+?):\s*$")
# Verdict lines of the repro protocol (docs/DESIGN.md section 3) and of its thread runner: printed
# after the tracebacks, never part of an exception message.
_VERDICT = re.compile(r"^(?:REPRODUCED:|NOT REPRODUCED|OTHER FAILURE:|WRONG_RESULT:|HANG:|SKIP:)")


def parse_tracebacks(text: str) -> list[PyTraceback]:
    """Every Python traceback in `text`, chained blocks folded into the last one.

    Thread names come from the trainer's `=== thread <name> failed: ... ===` report or from
    threading.excepthook's `Exception in thread <name>:`; a header-less traceback whose outermost
    frame is `<module>` is the main thread's. A header names only the exception printed right
    after it (its chain and, for an exception group, its members): another output line or a
    traceback that is not chained to it ends the header, so that a header-less traceback printed
    later (e.g. by a repro's main thread) does not inherit the last header's thread."""
    lines = text.splitlines()
    if "Exception Group Traceback" in text:
        lines = [_ungroup(line) for line in lines]
    result: list[PyTraceback] = []
    thread: str | None = None
    after_block = in_group = False
    chained: list[PyTraceback] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _REPORT_HEADER.match(line) or _HOOK_HEADER.match(line)
        if header:
            thread, chained, after_block, in_group = header.group(1), [], False, False
        elif line.strip() in _CHAIN_LINES and result and result[-1].thread == thread:
            chained.append(result.pop())
        elif line.startswith(_TB_START) or line.strip() == _TB_START:
            if after_block and not chained and not in_group:
                thread = None                       # a new, unrelated traceback
            ignored = i > 0 and "Exception ignored in" in lines[i - 1]
            block, i = _parse_block(lines, i + 1, thread, tuple(_flatten(chained)))
            chained = []
            if block is not None and ignored:
                block = dataclasses.replace(block, unraisable=True)
            if block is not None:
                result.append(block)
                after_block = True
                in_group = in_group or block.short_type in ("ExceptionGroup", "BaseExceptionGroup")
            continue
        elif after_block and line.strip():
            thread, after_block, in_group = None, False, False
        i += 1
    return result


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
        yield PyTraceback(thread=tb.thread, frames=tb.frames, exc_type=tb.exc_type,
                          message=tb.message)


def _parse_block(lines: list[str], i: int, thread: str | None,
                 chain: tuple[PyTraceback, ...]) -> tuple[PyTraceback | None, int]:
    frames: list[Frame] = []
    indent = len(lines[i - 1]) - len(lines[i - 1].lstrip())
    while i < len(lines):
        line = lines[i]
        frame = _TB_FRAME.match(line)
        if frame:
            frames.append(Frame(name=frame.group(3), filename=frame.group(1),
                                line=int(frame.group(2))))
        elif line.strip() and len(line) - len(line.lstrip()) <= indent:
            break                                   # first unindented line: the exception
        i += 1
    if i >= len(lines):
        return None, i
    exc = _EXC_LINE.match(lines[i].strip())
    if exc is None:
        return None, i
    message = [exc.group(2) or ""]
    i += 1
    # A bare `AssertionError` line means str(exc) == "": Python prints `Type: msg` whenever the
    # message is not empty, so the next line is other output, not a continuation.
    while (exc.group(2) is not None and i < len(lines) and lines[i].strip()
           and not _starts_something(lines[i])):
        message.append(lines[i])
        i += 1
    frames.reverse()
    if thread is None and frames and frames[-1].name == "<module>":
        thread = "MainThread"
    return PyTraceback(thread=thread, frames=tuple(frames), exc_type=exc.group(1),
                       message="\n".join(message).strip(), chain=chain), i


def _starts_something(line: str) -> bool:
    stripped = line.strip()
    return (stripped == _TB_START or stripped in _CHAIN_LINES or bool(_REPORT_HEADER.match(line))
            or bool(_HOOK_HEADER.match(line)) or line.startswith("Fatal Python error")
            or bool(_VERDICT.match(line)))


def first_failure(tracebacks: list[PyTraceback]) -> PyTraceback | None:
    """The first traceback of a thread that failed on its own: not a consequence of another
    thread's failure, nor an exception ignored by a finaliser (v5)."""
    return next((tb for tb in tracebacks if tb.short_type not in SECONDARY_TYPES and not tb.unraisable), None)


def primary_traceback(tracebacks: list[PyTraceback]) -> PyTraceback | None:
    """`first_failure`; failing that, the first traceback."""
    return first_failure(tracebacks) or (tracebacks[0] if tracebacks else None)


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
        earlier = first_failure(parse_tracebacks(text[:_native_start(text)]))
        if earlier is not None:
            return dataclasses.replace(exception_signature(earlier), then=native.summary)
        return native
    if rc is not None and rc < 0:
        name = _signal_name(-rc)
        return Signature(kind="signal", exc_type=name, keyed=(name,))
    tb = primary_traceback(parse_tracebacks(text))
    if tb is not None:
        return exception_signature(tb)
    if rc:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        msg = normalise_message(last)
        return Signature(kind="exit", exc_type=f"exit {rc}", message=msg, keyed=(str(rc), msg))
    return None


def exception_signature(tb: PyTraceback) -> Signature:
    role = thread_role(tb.thread) if tb.thread else ""
    frames = top_frames(tb.frames)
    base = dict(exc_type=tb.exc_type, role=role, frames=frames)
    text = tb.all_text()
    for name, pattern in KNOWN_MESSAGES:
        if re.search(pattern, text):
            return Signature(kind="known", message=name, keyed=(name,), **base)
    cuda = _CUDA.search(text)
    if cuda:
        msg = normalise_message(cuda.group(1))
        return Signature(kind="cuda", message=msg, keyed=(msg,), **base)
    msg = normalise_message(tb.message)
    entry = torch_entry(tb.frames)
    keyed = (tb.exc_type, msg, role, *frames, f"entry={entry}")
    return Signature(kind="exception", message=msg, keyed=keyed, **base)


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
