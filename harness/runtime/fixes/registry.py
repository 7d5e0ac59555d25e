"""The registry: one table from each fix's name to its implementation, and the reading of a
run's fix names against it (`none`, `recommended`, unknown names, CUDA-graph soundness)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.runtime.errors import ConfigError
from harness.runtime.fixes.autograd import SingleThreadAutograd
from harness.runtime.fixes.base import Fix
from harness.runtime.fixes.cudagraph_trees import CstashTlsInit, CudagraphLock, LocalTlsInit
from harness.runtime.fixes.device_init import CublasHandleInit, PinFakeCudaGuard
from harness.runtime.fixes.dynamo import GraphIsolation, NestedFxFallback
from harness.runtime.fixes.global_lock import GlobalLock
from harness.runtime.fixes.phase_lock import PhaseLock
from harness.runtime.fixes.policies import (
    EagerTargetUnlocked,
    PersistentBuffers,
    SequentialStartup,
    StreamSync,
    TargetHookTaps,
    ThreadLocalWarmup,
)
from harness.runtime.fixes.stance import ThreadLocalStance
from harness.runtime.fixes.stash import AwaitThreadExit, StashIncref

FIXES: dict[str, Fix] = {
    f.name: f
    for f in (
        GlobalLock(),
        PhaseLock(),
        SequentialStartup(),
        ThreadLocalWarmup(),
        LocalTlsInit(),
        CstashTlsInit(),
        PersistentBuffers(),
        SingleThreadAutograd(),
        NestedFxFallback(),
        GraphIsolation(),
        CublasHandleInit(),
        TargetHookTaps(),
        EagerTargetUnlocked(),
        CudagraphLock(),
        StashIncref(),
        StreamSync(),
        AwaitThreadExit(),
        ThreadLocalStance(),
        PinFakeCudaGuard(),
    )
}


RECOMMENDED = "recommended"
NONE = "none"


def check_cuda_graphs(names: Iterable[str], cuda_graphs: bool) -> None:
    """ConfigError for a fix named beside a compile mode that records CUDA graphs where it is
    known not to hold (Fix.unsound_with_cuda_graphs): one line before anything runs, rather than
    a crash minutes into a run."""
    if not cuda_graphs:
        return
    for n in names:
        fix = FIXES.get(n.strip())
        if fix is not None and fix.unsound_with_cuda_graphs:
            raise ConfigError(
                f"fix {fix.name!r} does not hold where compiled calls record CUDA graphs: "
                f"{fix.unsound_with_cuda_graphs}; use global-lock there, or a compile mode without CUDA graphs"
            )


def parse_names(names: Iterable[str]) -> tuple[list[str], bool]:
    """(registry names in order, whether `recommended` was asked for); ConfigError for an unknown
    name or `none` beside others. `recommended` may come with extra names (added to its set)."""
    unique = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if NONE in unique:
        if len(unique) > 1:
            raise ConfigError(
                f"fixes=none means no fix at all; it cannot be combined with "
                f"{', '.join(n for n in unique if n != NONE)}"
            )
        return [], False
    wants = RECOMMENDED in unique
    unique = [n for n in unique if n != RECOMMENDED]
    unknown = [n for n in unique if n not in FIXES]
    if unknown:
        raise ConfigError(f"unknown fix {unknown[0]!r}; valid fixes: {', '.join(FIXES)} (or {RECOMMENDED}, or {NONE})")
    return unique, wants
