"""Which named regions each thread is inside: the state the exposure probes read.

A region is entered and left by point hooks (`fx.trace` before/after, a stage point pair), per
thread, nested calls counted. The probes ask one question of it, cheaply, on hot paths: is some
*other* thread inside region R right now? No lock: each thread writes only its own key of a
region's dict and single dict operations are atomic under the GIL, so a reader sees a snapshot
that was true at some instant between two of its bytecodes (what a race's window needs).
"""

from __future__ import annotations


class Regions:
    """region name -> {thread ident: nesting depth}; a thread absent from a region is outside it."""

    __slots__ = ("_inside",)

    def __init__(self) -> None:
        self._inside: dict[str, dict[int, int]] = {}

    def _threads(self, region: str) -> dict[int, int]:
        threads = self._inside.get(region)
        if threads is None:
            threads = self._inside.setdefault(region, {})
        return threads

    def enter(self, region: str, thread: int) -> None:
        threads = self._threads(region)
        threads[thread] = threads.get(thread, 0) + 1

    def leave(self, region: str, thread: int) -> None:
        """Leave once; a leave without an enter (a hook that raised first) is ignored."""
        threads = self._inside.get(region)
        if not threads:
            return
        depth = threads.get(thread, 0)
        if depth > 1:
            threads[thread] = depth - 1
        else:
            threads.pop(thread, None)

    def inside(self, region: str, thread: int) -> bool:
        threads = self._inside.get(region)
        return bool(threads) and thread in threads

    def others_inside(self, region: str, thread: int) -> bool:
        """Whether a thread other than `thread` is inside `region`."""
        threads = self._inside.get(region)
        if not threads:
            return False
        return len(threads) > 1 or thread not in threads

    def threads_inside(self, region: str) -> frozenset[int]:
        return frozenset(self._inside.get(region, ()))
