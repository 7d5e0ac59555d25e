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

The parts live beside this module: harness.trial.frames (which frames count),
harness.trial.messages (known messages, normalising) and harness.trial.tracebacks (reading the
output into tracebacks, the first failure). Any of them can move keys.

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

import collections
import dataclasses
import hashlib
import json
import re
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from harness.trial.frames import frame_id, top_frames, torch_entry
from harness.trial.hangs import ThreadStack, parse_faulthandler
from harness.trial.messages import KNOWN_MESSAGES, normalise_message
from harness.trial.tracebacks import (
    SECONDARY_TYPES,
    PyTraceback,
    bare_exception,
    first_failure,
    parse_tracebacks,
    primary_traceback,
)

SIGNATURE_VERSION = 7


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


def thread_role(name: str | None) -> str:
    """`dflash-train-1` -> `dflash-train`, `Dummy-5` -> `Dummy`, `Thread-3 (work)` -> `Thread
    (work)`; faulthandler's nameless `Thread 0x...` -> `?`."""
    if not name or re.fullmatch(r"Thread 0x[0-9a-fA-F]+", name):
        return "?"
    name = re.sub(r"^Thread-\d+", "Thread", name)
    return re.sub(r"(?:[-_ ]?\d+)+$", "", name) or name


_FATAL = re.compile(r"Fatal Python error: ([^\n]+?)[ \t]*$", re.M)
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
# std::terminate with no exception: a forced unwind (pthread_exit) met a noexcept frame, as when
# a thread takes the GIL during finalization (race stash-exit-finalize, #38228). No stored trial's
# output held it before it was recognised, so no stored signature changes.
_TERMINATE_BARE = re.compile(r"terminate called without an active exception")
_WHAT = re.compile(r"^\s*what\(\):\s*(.+)$", re.M)
_CUDA = re.compile(r"CUDA error: ([^\n]+)")
_WRONG = re.compile(r"^WRONG_RESULT: ?(.*)$", re.M)
# faulthandler's marker that the crashing thread was running the garbage collector.
_IN_GC = re.compile(
    r"^Current thread 0x[0-9a-fA-F]+(?: \[[^\]]*\])? \(most recent call first\):"
    r"\n[ \t]+Garbage-collecting[ \t]*$",
    re.M,
)


def crash_signature(text: str, *, rc: int | None = None) -> Signature | None:
    """Signature of a run that ended badly, from its combined output and exit status.

    A native crash keys the run unless a thread had already failed with a Python exception
    before it (v5): then that first failure is the cause and the crash its aftermath, shown as
    `then <crash>` but not keyed. Three of the H200 campaign's seven segfaults during garbage
    collection came after the trainer's threads had died of out-of-memory (2) or F1c (1)."""
    native = _native_signature(text)
    if native is not None:
        before = text[: _native_start(text)]
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


@dataclass(kw_only=True, slots=True, frozen=True)
class RunFailure:
    """One distinct failure of a run: its signature, how often it was printed, by which threads."""

    signature: Signature
    count: int
    threads: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "key": self.signature.key,
            "summary": self.signature.summary,
            "exc_type": self.signature.exc_type,
            "count": self.count,
            "threads": list(self.threads),
        }


def run_failures(text: str, *, extra: Iterable[str] = ()) -> list[RunFailure]:
    """Every distinct failure a run printed, in order of first appearance: each thread's own
    exception (not a consequence of another's, not a finaliser's, not a warning), and a native
    crash (after an exception, shown as the first one's `then`, as crash_signature keys it). `extra`: tracebacks the run's thread hook recorded that the output may lack (a
    program that replaced sys.stderr or threading.excepthook after start-up)."""
    failures = _Failures()
    # The hook's records first: exact, where tracebacks printed at once interleave in the output.
    hooked = [tb for block in extra for tb in parse_tracebacks(block) if tb.short_type not in SECONDARY_TYPES]
    for tb in (*hooked, *_printed_unhooked(text, hooked)):
        failures.add(exception_signature(tb), tb.thread)
    native = _native_signature(text)
    if native is not None and failures.found:
        # A native crash after a thread's exception is its aftermath (v5): shown, not a failure of its own.
        first = next(iter(failures.found.values()))
        first[0] = dataclasses.replace(first[0], then=native.summary)
    elif native is not None:
        failures.add(native, None)
    if not failures.found:
        bare = bare_exception(text, known_only=True)
        if bare is not None:
            failures.add(exception_signature(bare), bare.thread)
    return failures.results()


def _printed_unhooked(text: str, hooked: list[PyTraceback]) -> Iterator[PyTraceback]:
    """The output's own failures, less the hooked ones it prints again: possibly interleaved past
    telling their threads apart, so each hooked exception type stands for that many printed ones;
    and a printed traceback under the header of a thread whose death was hooked is that death, read
    less well (another thread's print may land inside it and read as its exception line)."""
    covered = collections.Counter(tb.exc_type for tb in hooked)
    dead = collections.Counter(tb.thread for tb in hooked if tb.thread)
    for tb in parse_tracebacks(text):
        if tb.short_type in SECONDARY_TYPES or tb.unraisable or tb.handled:
            continue
        if covered[tb.exc_type] > 0:
            covered[tb.exc_type] -= 1
            dead[tb.thread] -= tb.thread in dead
            continue
        if tb.thread and dead[tb.thread] > 0:
            dead[tb.thread] -= 1
            covered[next(h.exc_type for h in hooked if h.thread == tb.thread)] -= 1
            continue
        yield tb


class _Failures:
    """Distinct failures by key, in order of first appearance: [signature, count, threads]."""

    def __init__(self) -> None:
        self.found: dict[str, list] = {}

    def add(self, sig: Signature, thread: str | None) -> None:
        entry = self.found.setdefault(sig.key, [sig, 0, []])
        entry[1] += 1
        if thread and thread not in entry[2]:
            entry[2].append(thread)

    def results(self) -> list[RunFailure]:
        return [RunFailure(signature=sig, count=n, threads=tuple(threads)) for sig, n, threads in self.found.values()]


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
    starts = [m.start() for m in (_FATAL.search(text), _TERMINATE.search(text), _TERMINATE_BARE.search(text)) if m]
    return min(starts) if starts else len(text)


def _native_signature(text: str) -> Signature | None:
    fatal = _FATAL.search(text)
    thrown = _TERMINATE.search(text)
    bare = None if thrown else _TERMINATE_BARE.search(text)
    if fatal is None and thrown is None and bare is None:
        return None
    what = _WHAT.search(text) if thrown else None
    message = normalise_message(what.group(1)) if what else ""
    if bare is not None and (fatal is None or bare.start() <= fatal.start()):
        # faulthandler's `Fatal Python error: Aborted` follows it: the terminate is the message.
        message = bare.group(0)
        if fatal is not None and fatal.group(1) == "Aborted":
            fatal = None
    cuda = _CUDA.search(what.group(1)) if what else None
    if cuda:
        msg = normalise_message(cuda.group(1))
        return Signature(kind="cuda", exc_type=thrown.group(1), message=msg, keyed=(msg,))
    kind = fatal.group(1) if fatal else thrown.group(1) if thrown else "std::terminate"
    start = fatal.start() if fatal else (thrown or bare).start()
    current = [t for t in parse_faulthandler(text[start:]) if t.status == "current"]
    frames = top_frames(current[0].frames, limit=1) if current else ()
    if _IN_GC.search(text, start):
        # Crashed while collecting (a finaliser, e.g. of CUDA graph state): the Python frame is
        # only the allocation that started the collection, anywhere in the program, so it stays
        # out of the key (v4); a crash in a frame's own code has no GC marker and keeps its frame.
        message = "; ".join(filter(None, (message, "during garbage collection")))
        frames = ()
    exc_type = thrown.group(1) if thrown else kind
    return Signature(
        kind="fatal", exc_type=exc_type, message=message, frames=frames, keyed=(exc_type, message, *frames)
    )


HELPER_ROLES = frozenset({"tqdm_monitor", "InductorSubproc"})
"""Threads that idle in their own loop in every dump (a progress bar's monitor, Inductor's reader
of compile-subprocess replies): in a key they only make one hang look like two, by whether a
progress bar or a compile pool happened to exist. The thread waiting on them shows the hang."""

AUTOGRAD_DEVICE_FRAMES = ("torch::autograd::Engine::thread_init", "torch::autograd::python::PythonEngine::thread_init")


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
        if not frames:  # only plumbing (e.g. a bare Timer): keep its top
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
