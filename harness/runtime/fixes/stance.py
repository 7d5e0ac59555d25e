"""thread-local-stance: set_stance's skip_guard_eval_unsafe read per thread (race stance-leak).

A fix for a race catalogued from public reports (harness/diagnosis/races.toml `reports`);
dict-mutation (pytorch#196208, repro r27), the other one, needs none of its own: global-lock holds
there."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harness.runtime.fixes.base import patch_once
from harness.runtime.fixes.global_lock import GlobalLock

_STANCE = threading.local()
"""The skip_guard_eval_unsafe value of the stance this thread last set (thread-local-stance)."""


class ThreadLocalStance(GlobalLock):
    """global-lock, plus set_stance's skip_guard_eval_unsafe read per thread: it applies only
    in the thread that set it (the upstream fix's semantics).

    torch 2.13 keeps the stance in one module global (torch._dynamo.eval_frame._stance) and every
    compiled call copies its skip_guard_eval_unsafe into a process-wide C flag of eval_frame.c, so
    one thread inside `set_stance(skip_guard_eval_unsafe=True)` cuts guard evaluation down in
    every thread's calls: silently wrong results (race stance-leak, repro r28). The patch records
    the value in the thread that sets a stance and makes the call's reader return that thread's;
    the lock keeps two calls' save and restore of the C flag from interleaving. Other stances
    (force_eager, ...) stay process-wide. Patched once per process, by the first thread that
    starts. PR #196637 (makes the eval-frame flags thread-local).
    """

    name = "thread-local-stance"
    targets = ("stance-leak",)
    upstream = ("#196637",)

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        from torch._dynamo import decorators, eval_frame

        # set_stance's methods call decorators' `_set_stance`; compile_wrapper calls eval_frame's reader.
        recorded = patch_once(decorators, "_set_stance", _recording_stance, self.name)
        return patch_once(eval_frame, "_is_skip_guard_eval_unsafe_stance", _own_stance, self.name) or recorded


def _recording_stance(set_stance: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def recording_set_stance(stance: Any) -> Any:
        prior = set_stance(stance)
        _STANCE.skip_guard_eval_unsafe = bool(stance.skip_guard_eval_unsafe)
        return prior

    return recording_set_stance


def _own_stance(read: Callable[[], bool]) -> Callable[[], bool]:
    def own_skip_guard_eval_unsafe() -> bool:
        return getattr(_STANCE, "skip_guard_eval_unsafe", False)

    return own_skip_guard_eval_unsafe
