"""Liveness signal for the harness: `beat()` on every optimizer step and stage hand-off.

Workload process contract (docs/DESIGN.md): if env `HARNESS_HEARTBEAT` names a file, it is rewritten
(tmp + rename, so a reader never sees a half-written line) with `"<counter> <unix time>\\n"`,
at most every `MIN_INTERVAL_S`. The counter counts every call, written or not, so a stalled
pipeline shows as a counter that stops moving even if wall time advances.
"""

from __future__ import annotations

import os
import threading
import time

ENV_HEARTBEAT = "HARNESS_HEARTBEAT"
MIN_INTERVAL_S = 0.2


class Heartbeat:
    """Rate-limited, thread-safe heartbeat file writer; does nothing when `path` is None."""

    def __init__(self, path: str | None, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = path
        self.min_interval_s = min_interval_s
        self.counter = 0
        self._last_write = float("-inf")
        self._lock = threading.Lock()

    def beat(self, force: bool = False) -> None:
        if self.path is None:
            return
        with self._lock:
            self.counter += 1
            now = time.monotonic()
            if not force and now - self._last_write < self.min_interval_s:
                return
            self._last_write = now
            self._write(f"{self.counter} {time.time():.3f}\n")

    def _write(self, text: str) -> None:
        tmp = f"{self.path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except OSError:
            # A missing heartbeat is the harness's signal; never crash the workload over it.
            pass


_default: Heartbeat | None = None
_default_lock = threading.Lock()


def _get_default() -> Heartbeat:
    global _default
    hb = _default
    if hb is None or hb.path != os.environ.get(ENV_HEARTBEAT):
        with _default_lock:
            if _default is None or _default.path != os.environ.get(ENV_HEARTBEAT):
                _default = Heartbeat(os.environ.get(ENV_HEARTBEAT) or None)
            hb = _default
    return hb


def beat(force: bool = False) -> None:
    """Process-wide heartbeat named by env HARNESS_HEARTBEAT (re-read if the env changes)."""
    _get_default().beat(force)
