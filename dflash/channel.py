"""Bounded channels between pipeline stages.

`Channel` wraps `queue.Queue(maxsize)`: a full channel blocks its producer (backpressure), and
every blocking call waits in slices of `poll_s` so that it re-checks the pipeline's stop event
(xdist `loop_once`; no `queue.get()` without a timeout anywhere). Closing puts a sentinel; a
consumer that takes it puts it back, so every consumer of a closed channel sees `ChannelClosed`
once the items before the sentinel are gone.

`OrderedReceiver` sits on the drafter side: drafter thread m asks for batch `seq = step*M + m`,
whichever target thread produced it, so the batch-to-replica assignment does not depend on
thread timing. `StartupGate` holds producers back until every drafter thread is ready; `Turns`
runs sections one thread at a time (sequential startup).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Generic, TypeVar

from dflash.trainer_errors import StageStopped
from harness.runtime.failpoints import fault_point

T = TypeVar("T")
_CLOSED = object()


class ChannelClosed(Exception):
    """The producer side closed the channel and every item before the close was taken."""


class Channel(Generic[T]):
    """Bounded multi-producer multi-consumer queue with a close sentinel and stop polling."""

    def __init__(self, name: str, maxsize: int, stop: threading.Event, poll_s: float = 0.1) -> None:
        if maxsize < 1:
            raise ValueError(f"channel {name}: maxsize must be >= 1, got {maxsize}")
        self.name = name
        self.maxsize = maxsize
        self._q: queue.Queue = queue.Queue(maxsize)
        self._stop = stop
        self._poll_s = poll_s
        self._closed = threading.Event()

    def put(self, item: T) -> None:
        """Block until there is room; raises StageStopped if the pipeline stops meanwhile."""
        if self._closed.is_set():
            raise RuntimeError(f"put on closed channel {self.name}")
        while True:
            if self._stop.is_set():
                raise StageStopped(f"stop while putting into {self.name}")
            try:
                self._q.put(item, timeout=self._poll_s)
                return
            except queue.Full:
                continue

    def get(self) -> T:
        """Next item; raises ChannelClosed after the close sentinel, StageStopped on stop."""
        while True:
            if self._stop.is_set():
                raise StageStopped(f"stop while getting from {self.name}")
            try:
                item = self._q.get(timeout=self._poll_s)
            except queue.Empty:
                continue
            if item is _CLOSED:
                self._put_sentinel()  # let the other consumers see the close too
                raise ChannelClosed(self.name)
            return item

    def close(self) -> None:
        """Mark the end of the stream; idempotent. Items already queued are still delivered."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._put_sentinel()

    def _put_sentinel(self) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(_CLOSED, timeout=self._poll_s)
                return
            except queue.Full:
                continue

    def depth(self) -> int:
        """Items queued now (approximate, like Queue.qsize)."""
        return self._q.qsize()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


class OrderedReceiver(Generic[T]):
    """Hands item `seq` to whichever thread asks for it, buffering items that arrive early.

    One caller at a time pulls from the channel (the others wait on a condition), so no item is
    taken by a thread that then blocks on it. `key(item)` gives an item's seq.
    """

    def __init__(self, channel: Channel[T], key, stop: threading.Event, poll_s: float = 0.1) -> None:
        self._chan = channel
        self._key = key
        self._stop = stop
        self._poll_s = poll_s
        self._buf: dict[int, T] = {}
        self._cond = threading.Condition()
        self._pulling = False
        self._closed = False

    def get(self, seq: int) -> T:
        while True:
            with self._cond:
                while True:
                    if seq in self._buf:
                        return self._buf.pop(seq)
                    if self._closed:
                        raise ChannelClosed(f"{self._chan.name} closed before seq {seq}")
                    if self._stop.is_set():
                        raise StageStopped(f"stop while waiting for seq {seq}")
                    if not self._pulling:
                        self._pulling = True
                        break
                    self._cond.wait(self._poll_s)
            self._pull_one()

    def _pull_one(self) -> None:
        item = None
        closed = False
        try:
            item = self._chan.get()
        except ChannelClosed:
            closed = True
        finally:
            with self._cond:
                self._pulling = False
                if closed:
                    self._closed = True
                elif item is not None:
                    self._buf[self._key(item)] = item
                self._cond.notify_all()

    def buffered(self) -> int:
        with self._cond:
            return len(self._buf)


class StartupGate:
    """Producers wait here until every drafter thread is ready (compiled, warmed up if asked).

    The thread whose `ready()` completes the count opens the gate (fault point
    `gate.before_open` runs in that thread). `wait()` polls the stop event and gives up after
    `timeout_s` with a TimeoutError naming how many parties were ready.
    """

    def __init__(
        self, parties: int, stop: threading.Event, *, timeout_s: float, poll_s: float = 0.1, on_open=None
    ) -> None:
        self.parties = parties
        self._stop = stop
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._on_open = on_open
        self._ready = 0
        self._lock = threading.Lock()
        self._open = threading.Event()

    def ready(self) -> None:
        with self._lock:
            self._ready += 1
            last = self._ready == self.parties
        if last:
            fault_point("gate.before_open")
            if self._on_open is not None:
                self._on_open()
            self._open.set()

    def wait(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        while not self._open.wait(self._poll_s):
            if self._stop.is_set():
                raise StageStopped("stop while waiting at the startup gate")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"startup gate: only {self._ready}/{self.parties} drafter threads ready "
                    f"after {self._timeout_s:.0f}s (pipeline.startup_timeout_s)"
                )

    @property
    def is_open(self) -> bool:
        return self._open.is_set()


class Turns:
    """One-at-a-time sections in thread order 0, 1, ..., n-1 (the sequential-startup fix)."""

    def __init__(self, n: int, stop: threading.Event, poll_s: float = 0.1) -> None:
        self._n = n
        self._stop = stop
        self._poll_s = poll_s
        self._next = 0
        self._cond = threading.Condition()

    def acquire(self, i: int) -> None:
        with self._cond:
            while self._next != i:
                if self._stop.is_set():
                    raise StageStopped(f"stop while waiting for startup turn {i}")
                self._cond.wait(self._poll_s)

    def release(self, i: int) -> None:
        with self._cond:
            assert self._next == i, "turn released out of order"
            self._next = i + 1
            self._cond.notify_all()
