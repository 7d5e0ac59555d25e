"""Fixes in Dynamo's per-thread config and per-code-object caches: nested-fx-fallback and
graph-isolation (a fresh code object, so a fresh cache)."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any

from harness.runtime.fixes.base import Fix

_isolate_ids = itertools.count(1)


class NestedFxFallback(Fix):
    """Set torch._dynamo.config.error_on_nested_fx_trace = False inside each worker thread.

    A compiled call made while another thread is inside FX tracing then runs eagerly instead of
    raising `Detected that you are using FX to symbolically trace a dynamo-optimized function`
    (F2, R1). Done per thread because torch 2.13 config overrides are thread-local (F14); on 2.11
    the config is global and setting it per thread is harmless. Issue #126024, PRs #168999,
    #187589.
    """

    name = "nested-fx-fallback"
    targets = ("F2", "F14")
    upstream = ("#126024", "#168999", "#187589")

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch._dynamo

        torch._dynamo.config.error_on_nested_fx_trace = False
        return True


class GraphIsolation(Fix):
    """isolate(fn): a copy of fn with a fresh code object, so Dynamo keeps a separate cache.

    Dynamo caches per code object; instances of one class (or threads sharing one function) share
    one cache list and one recompile limit, and with cudagraphs one recorded graph (F1c, F10, F11,
    R7). The Dynamo devlog "Isolate Recompiles" (2026-05-04) adds isolate_recompiles for this;
    see also #123177 (shared graph across threads). Separate Dynamo graphs are verified on CPU;
    on the H200 (torch 2.11) it did NOT stop r04 (F1c) or r12 (F11): cudagraph state is also
    shared below Dynamo (global generation counters, F6), see repro/README.md.
    """

    name = "graph-isolation"
    targets = ("F1c", "F10", "F11")
    upstream = ("#123177", "devlog 2026-05-04 isolate_recompiles")

    def isolate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if isinstance(fn, types.MethodType):
            return types.MethodType(self.isolate(fn.__func__), fn.__self__)
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"graph-isolation needs a function or bound method, got {type(fn).__name__}")
        return fresh_function(fn)


def fresh_function(fn: types.FunctionType) -> types.FunctionType:
    """Copy of `fn` with a distinct code object; globals, closure and defaults are shared."""
    uid = next(_isolate_ids)
    code = fn.__code__
    replace: dict[str, Any] = {"co_name": f"{code.co_name}__iso{uid}"}
    if hasattr(code, "co_qualname"):
        replace["co_qualname"] = f"{code.co_qualname}__iso{uid}"
    new = types.FunctionType(code.replace(**replace), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__doc__, new.__module__, new.__qualname__ = fn.__doc__, fn.__module__, fn.__qualname__
    return new
