"""single-thread-autograd: a compiled call's backward on the calling thread, not the autograd
engine's device thread."""

from __future__ import annotations

from typing import Any

from harness.runtime.fixes.base import Fix


class SingleThreadAutograd(Fix):
    """Run backward on the calling thread: torch.autograd.set_multithreading_enabled(False).

    Applied (thread-locally) inside around_call. With local-tls-init the
    backward then sees the thread's `local` (F1 via backward); the lazy backward compile then runs
    on the worker thread, not the autograd device thread (F8). PR #192004.
    """

    name = "single-thread-autograd"
    targets = ("F1", "F8")
    upstream = ("#192004", "#123177")

    def enter(self) -> Any:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        return torch.autograd.set_multithreading_enabled(False)

    def exit(self, token: Any) -> None:
        token.__exit__(None, None, None)
