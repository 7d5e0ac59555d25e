"""Applying a run's fixes: `FixSet` runs the active fixes' hooks (process, thread, device, around
each compiled call, graph isolation) and counts how often each acted; `call_key` names a call
for the keyed ones."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from harness.runtime.errors import ConfigError
from harness.runtime.fixes.base import Fix
from harness.runtime.fixes.registry import FIXES, parse_names

_OPAQUE = object()
"""An argument whose reading could break or change a trace: the call gets no key."""
_PLAIN_VALUES = (int, float, str, bool)


def call_key(fn: Any, *args: Any) -> tuple | None:
    """A compiled call's key for keyed fixes: the callable and each plain tensor argument's shape,
    dtype and device (None and scalars by value, anything else by type name).

    None (the call then runs alone under phase-lock) when the call is part of a trace: an argument
    is an FX Proxy or a FakeTensor, or a fake/proxy/functional dispatch mode is active in this
    thread. Their attributes are not read: `tuple(proxy.shape)` raises TraceError inside
    symbolic_trace, and a fake tensor's symbolic sizes are unhashable."""
    torch = sys.modules.get("torch")
    if torch is not None and torch._C._len_torch_dispatch_stack():
        return None
    sig = []
    for a in args:
        part = _arg_key(a, torch)
        if part is _OPAQUE:
            return None
        sig.append(part)
    return (id(fn), tuple(sig))


def _arg_key(a: Any, torch: Any) -> Any:
    if a is None or isinstance(a, _PLAIN_VALUES):
        return a
    if torch is None:
        return type(a).__name__
    if _traced(a, torch):
        return _OPAQUE
    if plain_tensor(a, torch):
        shape = tuple(a.shape)
        return (shape, a.dtype, a.device.type) if all(type(d) is int for d in shape) else _OPAQUE
    return type(a).__name__  # a tensor subclass or another object: its attributes may run user code


def plain_tensor(a: Any, torch: Any) -> bool:
    """A tensor or parameter of torch's own classes: a subclass's, a Proxy's or a FakeTensor's
    attributes are not read (they may run user code or record nodes)."""
    return type(a) in (torch.Tensor, torch.nn.Parameter)


def _traced(a: Any, torch: Any) -> bool:
    """An FX Proxy (whose every attribute read records a node) or a FakeTensor."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return isinstance(a, torch.fx.Proxy) or (fake is not None and isinstance(a, fake.FakeTensor))


class FixSet:
    """The active fixes of one run; thread-safe counters of how often each acted."""

    def __init__(self, fixes: Iterable[Fix] = ()) -> None:
        # `early` fixes (a patch the others' imports must already see) run their hooks first.
        self.fixes: tuple[Fix, ...] = tuple(sorted(fixes, key=lambda f: not f.early))
        self._names = frozenset(f.name for f in self.fixes)
        for f in self.fixes:
            missing = [r for r in f.requires if r not in self._names]
            if missing:
                raise ConfigError(f"fix {f.name!r} is only safe beside {', '.join(missing)}: add it to the fixes")
        self._call_fixes = tuple(f for f in self.fixes if type(f).enter is not Fix.enter)
        self.device_fixes = tuple(f for f in self.fixes if type(f).on_device is not Fix.on_device)
        self.keyed = any(f.keyed for f in self._call_fixes)
        """Whether a call's key is read (call_key): without a keyed fix the arguments are never inspected."""
        self.counts: dict[str, int] = {f.name: 0 for f in self.fixes}
        self._lock = threading.Lock()

    @classmethod
    def from_names(cls, names: Iterable[str]) -> FixSet:
        """Registry names, or `none` alone (raw); `recommended` must be resolved first
        (`resolve_names`: it depends on the torch, the device plan and the compile mode)."""
        unique, wants_recommended = parse_names(names)
        if wants_recommended:
            raise ConfigError(
                "fixes=recommended is resolved by the trainer (harness.runtime.fixes.recommended_sets.resolve_names)"
            )
        return cls(FIXES[n] for n in unique)

    def active(self, name: str) -> bool:
        if name not in FIXES:
            raise ConfigError(f"unknown fix {name!r}; valid fixes: {', '.join(FIXES)}")
        return name in self._names

    def note(self, name: str, n: int = 1) -> None:
        """Record that the (active) fix `name` acted n times; used by the pipeline for policies."""
        if name in self._names:
            with self._lock:
                self.counts[name] += n

    def process_start(self) -> None:
        """Process-wide initialisation; call once from the main thread before starting workers."""
        for fix in self.fixes:
            if fix.process_start():
                self.note(fix.name)

    def thread_start(self, role: str) -> None:
        """Per-thread initialisation; call first thing in every worker thread's body."""
        for fix in self.fixes:
            if fix.thread_start(role):
                self.note(fix.name)

    def on_device(self, device: Any) -> None:
        """Per-device initialisation; call right after the thread binds its device."""
        for fix in self.fixes:
            if fix.on_device(device):
                self.note(fix.name)

    @contextlib.contextmanager
    def around_call(self, key: Any = None) -> Iterator[None]:
        """Wrap one compiled call (forward, or forward + backward) with the call-level fixes;
        `key` names the callable and its input signature (call_key) for the keyed ones."""
        if not self._call_fixes:
            yield
            return
        with contextlib.ExitStack() as stack:
            for fix in self._call_fixes:
                token = fix.enter(key) if fix.keyed else fix.enter()
                stack.callback(fix.exit, token)
                self.note(fix.name)
            yield

    def isolate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Per-thread copy of `fn` with its own Dynamo cache if graph-isolation is active."""
        if "graph-isolation" not in self._names:
            return fn
        self.note("graph-isolation")
        return FIXES["graph-isolation"].isolate(fn)  # type: ignore[attr-defined]

    def describe(self) -> str:
        if not self.fixes:
            return "fixes: none"
        with self._lock:
            parts = [f"{f.name} (acted {self.counts[f.name]}x)" for f in self.fixes]
        return "fixes: " + ", ".join(parts)

    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fixes)
