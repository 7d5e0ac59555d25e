"""The one worker loop of matrix, stress and hunt: named worker threads over `take()`.

An engine supplies what to take next (`take`, None when there is nothing more), how to run and
record one item (`work`) and, where it shows progress, a `tick` the main thread calls while it
waits. The loop owns the rest, the same for every engine:
- workers named `harness-<name>-<k>`, each taking until `take()` gives None or `stop` is set;
- a worker's exception stops the others and surfaces as an ExceptionGroup;
- Ctrl-C is a flag (`sigint_as_flag`): the runs in flight are killed (`kill_running`, by default
  every child process group), and engines that read `interrupted` under their lock record none;
  SIGTERM (harness.cli's Terminated) does the same, then raises on;
- the join waits for the longest run plus JOIN_MARGIN_S; a worker still alive then is a defect.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from harness.runtime.errors import UserInputError
from harness.trial import lifeline

JOIN_MARGIN_S = 60.0
"""Past a run's own deadline, how long a worker may take to return before it counts as stuck."""
TICK_S = 0.1

Item = TypeVar("Item")


@contextlib.contextmanager
def sigint_as_flag(on_interrupt):
    """Within the block SIGINT calls `on_interrupt()` and raises nothing: a KeyboardInterrupt inside
    Thread.join can leave a live thread marked stopped (Python 3.11), and the process would exit with
    a run half-recorded. Installed only in the main thread (elsewhere signal.signal cannot be);
    the previous handler comes back after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: on_interrupt())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def kill_child_groups() -> int:
    """SIGKILL the process group of every direct child that leads its own group (the runner
    starts each trial with start_new_session=True) but the trials' reaper, which must outlive
    us (harness.trial.lifeline); Linux /proc. Returns how many."""
    me, killed, spare = os.getpid(), 0, lifeline.reaper_pid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid, pgid = int(stat.parent.name), int(fields[1]), int(fields[2])
        if ppid == me and pgid == pid and pid != spare:
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class WorkLoop(Generic[Item]):
    """`workers` named threads running `work(item)` for each `take()` until it gives None."""

    def __init__(
        self,
        name: str,
        *,
        workers: int,
        take: Callable[[], Item | None],
        work: Callable[[Item], None],
        longest_s: float,
        kill_running: Callable[[], int] = kill_child_groups,
        tick: Callable[[], None] | None = None,
        on_interrupt: str = "not recorded",
        unit: str = "run",
    ) -> None:
        self.name = name
        self.workers = max(1, workers)
        self._take, self._work, self._tick = take, work, tick
        self.longest_s = longest_s
        """The longest a run may take: the join waits that long plus JOIN_MARGIN_S."""
        self.kill_running = kill_running
        self.on_interrupt, self.unit = on_interrupt, unit
        """What happens to the killed runs, and what one is called, for the interrupt's line."""
        self.stop = threading.Event()
        self.interrupted = False
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._live = 0
        self._done = threading.Event()
        """Set when the last worker has ended (its own flag: a thread killed mid-join may read as stopped)."""

    def interrupt(self) -> None:
        self.interrupted = True
        self.stop.set()

    def run(self) -> None:
        """Run until every worker has ended; raises the workers' errors (not after an interrupt)
        and SIGTERM's KeyboardInterrupt once the runs in flight are killed."""
        threads = [threading.Thread(target=self._worker, name=f"harness-{self.name}-{k}") for k in range(self.workers)]
        self._live = len(threads)
        raised = None
        try:
            with sigint_as_flag(self.interrupt):
                for t in threads:
                    t.start()
                self._watch()
        except KeyboardInterrupt as e:  # SIGTERM (harness.cli's Terminated): the same, then 143
            self.interrupt()
            raised = e
        if self.interrupted:
            killed = self.kill_running()
            print(
                f"interrupted: killed {killed} running {self.unit}(s), {self.on_interrupt}", file=sys.stderr, flush=True
            )
        self._join(threads)
        if raised is not None:
            raise raised
        bad_input = [e for e in self.errors if isinstance(e, UserInputError)]
        if bad_input and not self.interrupted:
            raise bad_input[0]  # the user's to fix (a Ray node without the program's folder): one line
        if self.errors and not self.interrupted:
            raise ExceptionGroup(f"{self.name} worker failed", self.errors)

    def _watch(self) -> None:
        while not self._done.wait(TICK_S) and not self.interrupted:
            if self._tick is not None:
                self._tick()

    def _worker(self) -> None:
        try:
            while not self.stop.is_set() and (item := self._take()) is not None:
                self._work(item)
        except BaseException as e:  # surfaced by run() as an ExceptionGroup
            with self._lock:
                self.errors.append(e)
            self.stop.set()
        finally:
            with self._lock:
                self._live -= 1
                if not self._live:
                    self._done.set()

    def _join(self, threads: list[threading.Thread]) -> None:
        """Wait for the workers. After an interrupt, keep killing child process groups while
        waiting: a worker may have been starting its run's process during the first sweep (seen
        once in CI: that run went on and the interrupted command waited for it)."""
        deadline = time.monotonic() + self.longest_s + JOIN_MARGIN_S
        while not self._done.wait(0.2) and time.monotonic() < deadline:
            if self.interrupted:
                self.kill_running()
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck or not self._done.is_set():
            raise RuntimeError(f"{self.name} workers still running after their deadline: {stuck}")


def format_elapsed(s: float) -> str:
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s"
