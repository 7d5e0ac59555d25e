"""What a hung process's threads wait on: the program's own locks, queues and events, or torch.

A user whose threaded program hangs first needs to know whose hang it is. Threads blocked in
`acquire`, `Queue.get`, `Event.wait` or `Condition.wait` with no torch frame between their own
code and the wait are a deadlock of the program (two or more lock waiters: a lock-order cycle;
otherwise a wake-up that never came: a lost notify, a sentinel never sent). A thread whose wait
sits under a torch frame (a compile lock, the autograd engine, a CUDA sync) is a wait inside
torch, which is where the catalogued hangs live. Threads waiting on a lock of a `--fix`
(harness.runtime's frames) while the thread holding it waits, inside its guarded call, on threads
of its own, are the fix deadlocking the program: never the program's own locks.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trial.frames import is_library, is_torch, module_of
from harness.trial.hangs import Frame, ThreadStack
from harness.trial.signature import in_hang_key

OWN_LOCK_CYCLE = "own-lock-cycle"
OWN_LOST_WAKEUP = "own-lost-wakeup"
TORCH_WAIT = "torch-wait"
OWN_WAIT = "own-wait"
"""Blocked in the program's code on something else (a join, a sleep, a pipe)."""
FIX_LOCK_CYCLE = "fix-lock-cycle"
"""Threads wait on a fix's lock while its holder, inside a guarded call, waits on threads (a future, a
join, a queue): the fix deadlocks the program (global-lock around a compile that waits on its pool)."""
FIX_LOCK_WAIT = "fix-lock-wait"
"""Threads wait on a fix's lock whose holder the dump does not show waiting on threads in a guarded call."""
BUSY_IN_TORCH = "busy-in-torch"
"""One dump only: a thread of the program was running inside torch (py-spy's `active`), so the
process was working, not stuck, when it was taken: a cold compile or autotuning under a lock looks
like a hang from outside (a price bench of the launch-bound CUDA-graph set, H200, torch 2.11)."""
FIX_LOCK_TEXTS = (
    "the fix deadlocks this program (its lock is in a wait cycle, not the program's own locks)",
    "threads wait on the fix's lock, held by a call that does not return",
)
"""How a hang's detail says it waits on a `--fix` lock (FIX_LOCK_CYCLE, FIX_LOCK_WAIT): diagnose reads it."""

# What a running thread does, by the innermost torch module of its stack that names a phase.
_BUSY_PHASES = (
    ("torch._inductor.runtime.benchmarking", "autotuning Inductor kernels (benchmarking configurations)"),
    ("torch._inductor.select_algorithm", "autotuning Inductor kernels (benchmarking configurations)"),
    ("triton", "compiling Triton kernels"),
    ("torch._inductor.async_compile", "compiling kernels"),
    ("torch._inductor.codecache", "compiling kernels"),
    ("torch._inductor.cudagraph_trees", "recording or warming up CUDA graphs"),
    ("torch._inductor", "compiling a graph with Inductor"),
    ("torch._functorch", "tracing a graph (AOT autograd)"),
    ("torch._dynamo", "tracing a function (Dynamo)"),
)

_SYNC_WAITS = {
    ("threading", "wait"): "a Condition/Event wait",
    ("threading", "acquire"): "a lock",
    ("threading", "_wait_for_tstate_lock"): "a thread's end (join)",
    ("threading", "join"): "a thread's end (join)",
    ("queue", "get"): "Queue.get",
    ("queue", "put"): "Queue.put",
    ("concurrent.futures._base", "result"): "a future",
    ("concurrent.futures._base", "wait"): "futures",
    ("concurrent.futures.thread", "shutdown"): "an executor's shutdown",
}
_LOCK_NATIVE = ("acquire", "lock_PyThread", "sem_", "futex", "pthread_cond", "pthread_mutex")
_THREAD_WAITS = frozenset(
    ("a future", "futures", "a thread's end (join)", "an executor's shutdown", "Queue.get", "Queue.put")
    + ("a Condition/Event wait", "a lock")
)
"""What a holder waits on when it waits on other threads."""
FIX_MODULES = ("harness.runtime.fixes", "harness.runtime.guard", "harness.inject")
"""The fixes' code in a program (`stress --fix`, Guard): their locks are the fix's, not the program's."""
_GUARDED_CALLS = frozenset(
    (("harness.inject", "_call"), ("harness.inject", "method"), ("harness.inject", "function"))
    + (("harness.runtime.guard", "__call__"),)
)
"""Frames of a call wrapped by a fix (inject's wrappers, Guard.compiled's callable): a thread with one
on its stack is inside a guarded call, holding the fix's lock."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Blocked:
    thread: str
    waits_on: str
    """What it waits on, in words (`a lock`, `Queue.get`, `torch._inductor.async_compile:wait`)."""
    at: str
    """The program's own frame it waits from (`app.py:31 in handle`), or the torch frame."""
    in_torch: bool
    lock: bool
    running: bool = False
    """Not waiting: running inside torch when dumped (`waits_on` then says what it was doing)."""
    fix_lock: bool = False
    """Waiting on a fix's lock (`at` is the fix's frame, `via` the frame that made the guarded call)."""
    via: str = ""
    guarded: str = ""
    """Inside a guarded call: the frame that made it ('' when not)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HangKind:
    kind: str
    """OWN_LOCK_CYCLE, OWN_LOST_WAKEUP, OWN_WAIT or TORCH_WAIT."""
    blocked: tuple[Blocked, ...]

    def text(self) -> str:
        what = {
            OWN_LOCK_CYCLE: "a deadlock in the program's own locks (a lock-order cycle?)",
            OWN_LOST_WAKEUP: "a lost wake-up in the program's own code (a notify, item or event that never came)",
            OWN_WAIT: "the program's own threads wait (no torch frame between their code and the wait)",
            TORCH_WAIT: "a wait inside torch",
            BUSY_IN_TORCH: "busy inside torch when dumped",
            FIX_LOCK_CYCLE: FIX_LOCK_TEXTS[0],
            FIX_LOCK_WAIT: FIX_LOCK_TEXTS[1],
        }[self.kind]
        if self.kind in (FIX_LOCK_CYCLE, FIX_LOCK_WAIT):
            return f"{what}: {_fix_cycle_text(self.blocked)}"
        if self.kind == BUSY_IN_TORCH:  # who runs and where says it; the waiters are counted
            running = [b for b in self.blocked if b.running]
            waiting = len(self.blocked) - len(running)
            shown = "; ".join(f"{b.thread} {b.waits_on} at {b.at}" for b in running)
            return f"{what}: {shown}" + (f"; {waiting} other thread(s) wait" if waiting else "")
        shown = "; ".join(f"{b.thread} on {b.waits_on} at {b.at}" for b in self.blocked[:4])
        more = f"; and {len(self.blocked) - 4} more" if len(self.blocked) > 4 else ""
        return f"{what}: {shown}{more}" if shown else what


def blocked_on(t: ThreadStack) -> Blocked | None:
    """Where one thread waits: the innermost frames down to the first frame of the program's own
    code (or of a fix, whose lock it then waits on). None for a thread with no Python frame."""
    python = [f for f in t.frames if f.is_python]
    if not python:
        return None
    guarded = _guarded_from(python)
    waits_on = ""
    for i, f in enumerate(python):
        if _is_fix(f):
            return _at_fix(t, python, i, waits_on or _native_wait(t), guarded)
        if is_torch(f):
            return Blocked(
                thread=t.name,
                waits_on=f"{module_of(f.filename)}:{f.name.rsplit('.', 1)[-1]}",
                at=f"{f}",
                in_torch=True,
                lock=False,
                guarded=guarded,
            )
        if _is_harness(f):  # the harness's plumbing in the program (bootstrap, fault points): not its code
            continue
        if not is_library(f):
            waits_on = waits_on or _native_wait(t)
            return Blocked(
                thread=t.name, waits_on=waits_on, at=f"{f}", in_torch=False, lock=waits_on == "a lock", guarded=guarded
            )
        key = (module_of(f.filename), f.name.rsplit(".", 1)[-1])
        if key in _SYNC_WAITS:  # the outermost one names it (Queue.get, not its Condition.wait)
            waits_on = _SYNC_WAITS[key]
    # Only library frames (a pool's worker idling in its own loop): an idle helper.
    return None


def _native_wait(t: ThreadStack) -> str:
    """What the C call under the innermost Python frame waits in (py-spy --native's frames above it)."""
    native = []
    for f in t.frames:
        if f.is_python:
            break
        native.append(f.name)
    lock = any(any(m in n for m in _LOCK_NATIVE) for n in native)
    return "a lock" if lock else "a call it made (a C-level wait, a sleep or a lock)"


def _is_harness(f: Frame) -> bool:
    module = module_of(f.filename)
    return module.startswith("harness.") or module == "sitecustomize"


def _is_fix(f: Frame) -> bool:
    # inject's thread bootstrap sits under every thread of a `--fix` run: plumbing, not a fix's wait
    return module_of(f.filename).startswith(FIX_MODULES) and not f.name.endswith("bootstrap_inner")


def _program_frame(frames: list[Frame]) -> Frame | None:
    """The first frame of the program's own code in `frames` (else the first torch frame)."""
    own = next((f for f in frames if not (is_library(f) or _is_harness(f) or is_torch(f))), None)
    return own or next((f for f in frames if is_torch(f)), None)


def _guarded_from(python: list[Frame]) -> str:
    """The frame that made the guarded call this thread is inside ('' when it is in none)."""
    for i, f in enumerate(python):
        if (module_of(f.filename), f.name.rsplit(".", 1)[-1]) in _GUARDED_CALLS:
            caller = _program_frame(python[i + 1 :])
            return f"{caller or f}"
    return ""


def _at_fix(t: ThreadStack, python: list[Frame], i: int, waits_on: str, guarded: str) -> Blocked:
    """A thread whose innermost own frame is a fix's: waiting on the fix's lock when it waits on a lock."""
    lock = waits_on in ("a lock", "a Condition/Event wait")
    via = _program_frame(python[i + 1 :])
    return Blocked(
        thread=t.name,
        waits_on="the fix's lock" if lock else waits_on,
        at=f"{python[i]}",
        in_torch=False,
        lock=lock,
        fix_lock=lock,
        via=f"{via}" if via else "",
        guarded=guarded,
    )


def _fix_cycle_text(blocked: tuple[Blocked, ...]) -> str:
    """Who holds the fix's lock and what it waits on; who waits for the lock, where and from where."""
    holders = [b for b in blocked if not b.fix_lock]
    waiters = [b for b in blocked if b.fix_lock]
    parts = [
        f"{b.thread} holds it in a guarded call from {b.guarded} and waits on {b.waits_on} at {b.at}"
        if b.guarded
        else f"{b.thread} on {b.waits_on} at {b.at}"
        for b in holders[:2]
    ]
    for at, via in dict.fromkeys((b.at, b.via) for b in waiters):
        group = [b.thread for b in waiters if (b.at, b.via) == (at, via)]
        shown = ", ".join(group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
        parts.append(
            f"{len(group)} thread(s) wait for it at {at}" + (f", called from {via}" if via else "") + f": {shown}"
        )
    return "; ".join(parts)


def busy_in_torch(t: ThreadStack) -> Blocked | None:
    """A thread py-spy saw running (not idle) with torch frames: what it was doing, in words."""
    if not t.status.startswith("active"):
        return None
    python = [f for f in t.frames if f.is_python]
    for prefix, what in _BUSY_PHASES:
        for f in python:  # innermost first: the phase nearest the running code names it
            module = module_of(f.filename)
            if module == prefix or module.startswith(prefix + "."):
                return Blocked(thread=t.name, waits_on=what, at=f"{f}", in_torch=True, lock=False, running=True)
    torch_frame = next((f for f in python if is_torch(f)), None)
    if torch_frame is None:
        return None
    return Blocked(
        thread=t.name, waits_on="running torch code", at=f"{torch_frame}", in_torch=True, lock=False, running=True
    )


def classify(threads: tuple[ThreadStack, ...], *, one_dump: bool = False) -> HangKind | None:
    """The kind of a hang from one dump (None when no thread of the program shows in it).

    `one_dump`: the dump is all there is (a log, a bench killed at its limit), not a hang the
    runner confirmed idle twice; a program thread running in torch then makes it BUSY_IN_TORCH."""
    busy, blocked = _busy_and_blocked(threads, one_dump)
    if busy:
        return HangKind(kind=BUSY_IN_TORCH, blocked=tuple(busy + sorted(blocked, key=lambda b: b.thread)))
    if not blocked:
        return None
    fix_kind = _fix_lock_kind(blocked)
    if fix_kind is not None:
        return fix_kind
    # A thread joining others waits on them, not on the bug: it comes last in the words.
    blocked.sort(key=lambda b: (b.waits_on == "a thread's end (join)", b.thread))
    if any(b.in_torch for b in blocked):
        torch_first = sorted(blocked, key=lambda b: not b.in_torch)
        return HangKind(kind=TORCH_WAIT, blocked=tuple(torch_first))
    return HangKind(kind=_own_kind(blocked), blocked=tuple(blocked))


def _busy_and_blocked(threads: tuple[ThreadStack, ...], one_dump: bool) -> tuple[list[Blocked], list[Blocked]]:
    """The program's threads running in torch (only from `one_dump`) and those blocked."""
    busy: list[Blocked] = []
    blocked: list[Blocked] = []
    for t in threads:
        if not in_hang_key(t):
            continue
        if one_dump and (b := busy_in_torch(t)) is not None:
            busy.append(b)
        elif (b := blocked_on(t)) is not None:
            blocked.append(b)
    return busy, blocked


def _own_kind(blocked: list[Blocked]) -> str:
    """The kind of a hang in the program's own waits (no thread waits in torch)."""
    if len([b for b in blocked if b.lock]) >= 2:
        return OWN_LOCK_CYCLE
    if any(b.waits_on in ("Queue.get", "Queue.put", "a Condition/Event wait", "a future", "futures") for b in blocked):
        return OWN_LOST_WAKEUP
    return OWN_WAIT


def _fix_lock_kind(blocked: list[Blocked]) -> HangKind | None:
    """FIX_LOCK_CYCLE when threads wait on a fix's lock and a thread inside a guarded call (its holder)
    waits on threads; FIX_LOCK_WAIT when no holder shows and no thread waits in torch (then the torch
    wait is the story, and the fix's waiters queue behind it)."""
    waiters = sorted((b for b in blocked if b.fix_lock), key=lambda b: b.thread)
    if not waiters:
        return None
    others = [b for b in blocked if not b.fix_lock]
    holders = [b for b in others if b.guarded and not b.in_torch and b.waits_on in _THREAD_WAITS]
    if holders:
        return HangKind(kind=FIX_LOCK_CYCLE, blocked=(*holders, *waiters))
    if any(b.in_torch for b in others):
        return None
    return HangKind(kind=FIX_LOCK_WAIT, blocked=(*others, *waiters))
