"""Supervisor of the stage threads: start, first error wins, stop everyone, join with a deadline.

Every worker runs inside `Supervisor._body`: `fs.thread_start(role)` first (per-thread fix
state, F14), then the stage loop; an exception is recorded as a `ThreadFailure` (type, message,
traceback, thread name) and sets the shared stop event, after which every stage leaves its
blocking call within one poll interval, and the replica barrier is aborted. A `StageStopped` or
`ChannelClosed` seen after stop is the consequence of someone else's failure, not a failure.
Shutdown joins each thread against one overall deadline and reports the ones still alive, each
with its innermost frame (CPython `threading_helper.join_thread`); the caller may cap that
deadline (a signal or a stall must end the run within seconds even while a thread is stuck in a
compile, which no stop event reaches).
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from dflash import stacks
from dflash.channel import ChannelClosed
from dflash.trainer_errors import StageStopped


@dataclass(frozen=True, slots=True)
class ThreadFailure:
    thread: str
    exc: BaseException
    traceback: str
    at: float
    """time.monotonic() when the failure was recorded."""

    @property
    def headline(self) -> str:
        msg = str(self.exc).strip().splitlines()
        return f"{type(self.exc).__name__}: {msg[0] if msg else ''}".rstrip(": ")

    def report(self) -> str:
        return f"=== thread {self.thread} failed: {self.headline} ===\n{self.traceback.rstrip()}"


@dataclass(kw_only=True, slots=True)
class PipelineResult:
    failures: list[ThreadFailure] = field(default_factory=list)
    alive: list[str] = field(default_factory=list)
    """Threads still alive after the shutdown deadline."""
    alive_where: dict[str, str] = field(default_factory=dict)
    """Innermost meaningful frame (`module:function:line`) of each thread in `alive`."""
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and not self.alive

    def report(self) -> str:
        parts = [f.report() for f in self.failures]
        if self.alive:
            parts.append(f"=== threads still alive after the shutdown deadline: {', '.join(self.alive)} ===")
            parts += [f"  {name} in {self.alive_where[name]}" for name in self.alive if name in self.alive_where]
        return "\n".join(parts)


class Supervisor:
    def __init__(self, *, stop: threading.Event, fs, shutdown_deadline_s: float, poll_s: float = 0.1) -> None:
        self.stop = stop
        self.fs = fs
        self.shutdown_deadline_s = shutdown_deadline_s
        self.poll_s = poll_s
        self._threads: list[threading.Thread] = []
        self._finishers: list[threading.Thread] = []
        self._failures: list[ThreadFailure] = []
        self._on_stop: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._changed = threading.Event()

    def add(self, name: str, role: str, body: Callable[[], None], *, finisher: bool = False) -> None:
        """Register a worker; the run ends when every `finisher` thread has returned."""
        t = threading.Thread(target=self._body, args=(name, role, body), name=name)
        self._threads.append(t)
        if finisher:
            self._finishers.append(t)

    def wake(self) -> None:
        """Re-check `should_abort` now instead of at the next poll (any thread may call it)."""
        self._changed.set()

    def on_stop(self, fn: Callable[[], None]) -> None:
        """Run `fn` when the pipeline stops (e.g. abort the replica barrier)."""
        self._on_stop.append(fn)

    def _body(self, name: str, role: str, body: Callable[[], None]) -> None:
        try:
            self.fs.thread_start(role)
            body()
        except (StageStopped, ChannelClosed) as e:
            if not self.stop.is_set():  # nobody asked to stop: a real failure
                self.fail(name, e)
        except BaseException as e:  # noqa: BLE001 - every failure is recorded and reported
            self.fail(name, e)
        finally:
            self._changed.set()

    def fail(self, name: str, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with self._lock:
            self._failures.append(ThreadFailure(thread=name, exc=exc, traceback=tb, at=time.monotonic()))
        self._stop_all()

    def _stop_all(self) -> None:
        self.stop.set()
        for fn in self._on_stop:
            fn()
        self._changed.set()

    def run(
        self, should_abort: Callable[[], bool] = lambda: False, join_by: Callable[[], float | None] = lambda: None
    ) -> PipelineResult:
        """Start every thread, wait for the finishers (or a failure/abort), stop and join.

        `join_by()`, asked once the loop ends, may cap the join deadline (a time.monotonic())."""
        t0 = time.monotonic()
        try:
            for t in self._threads:
                t.start()
            while not self.stop.is_set():
                if all(not t.is_alive() for t in self._finishers):
                    break
                if should_abort():
                    break
                self._changed.wait(self.poll_s)
                self._changed.clear()
        finally:
            self._stop_all()  # releases producers still blocked on a full channel
            alive = self._join(join_by())
        with self._lock:
            failures = list(self._failures)
        return PipelineResult(
            failures=failures,
            alive=[t.name for t in alive],
            alive_where=stacks.of_threads(alive),
            elapsed_s=time.monotonic() - t0,
        )

    def _join(self, cap: float | None = None) -> list[threading.Thread]:
        deadline = time.monotonic() + self.shutdown_deadline_s
        if cap is not None:
            deadline = min(deadline, cap)
        for t in self._threads:
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        return [t for t in self._threads if t.is_alive()]


class SignalStop:
    """SIGINT/SIGTERM -> finish at the next step boundary; a second signal stops at once.

    The handler only records the signal (Python runs it on the main thread, between bytecodes);
    the trainer's main loop decides how long to wait for the step boundary (`since()`)."""

    EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self.at: float | None = None
        """time.monotonic() of the first signal."""
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in self.EXIT_CODES:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.at = time.monotonic()
        self.signum = signum
        self.count += 1

    def since(self) -> float:
        """Seconds since the first signal (0.0 before any)."""
        return 0.0 if self.at is None else time.monotonic() - self.at

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        assert self.signum is not None
        return self.EXIT_CODES.get(signal.Signals(self.signum), 128 + self.signum)
