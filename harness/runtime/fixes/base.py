"""The base of every fix (its hooks, each a no-op by default), the hookless policy, and the
once-per-process patch that fixes wrapping a torch function share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Fix:
    """Base class: a named strategy; hooks default to doing nothing."""

    name = ""
    targets: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()
    early = False
    keyed = False
    """Whether `enter` takes the call's key (FixSet.around_call(key))."""
    unsound_with_cuda_graphs = ""
    """Why the fix does not hold where compiled calls record CUDA graphs ('' = it does):
    check_cuda_graphs() refuses the pair."""
    requires: tuple[str, ...] = ()
    """Fixes it is unsafe without: a FixSet naming it without them is a ConfigError."""

    def process_start(self) -> bool:
        """Once, in the thread that outlives the workers (the main thread), before they start."""
        return False

    def thread_start(self, role: str) -> bool:
        return False

    def on_device(self, device: Any) -> bool:
        return False

    def enter(self) -> Any:
        return None

    def exit(self, token: Any) -> None:
        return None

    def summary(self) -> str:
        return (self.__doc__ or "").strip().splitlines()[0]


class Policy(Fix):
    """A policy the pipeline reads through FixSet.active(name); no hook of its own."""


_patches_lock = threading.Lock()


def patch_once(owner: Any, attr: str, wrap: Callable[[Callable], Callable], fix: str) -> bool:
    """owner.attr = wrap(owner.attr), once per process: every thread's thread_start calls it, the
    first one patches (True), the others find the mark of `fix` and leave it (False)."""
    with _patches_lock:
        current = getattr(owner, attr)
        if getattr(current, "_harness_patched_by", None) == fix:
            return False
        patched = wrap(current)
        patched._harness_patched_by = fix  # type: ignore[attr-defined]
        patched.__wrapped__ = current  # type: ignore[attr-defined]
        setattr(owner, attr, patched)
        return True
