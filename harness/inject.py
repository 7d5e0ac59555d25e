"""Apply registry fixes to a program without editing it: `harness stress --fix NAME[,NAME]`.

The trial bootstrap calls `install(names)` when HARNESS_FIXES is set, before the program runs.
It builds a `Guard` (harness.runtime.guard) and puts its hooks where an unmodified program passes:

* every thread's start (`Thread._bootstrap_inner`, which a `Thread` subclass overriding `run`
  still goes through) runs the per-thread set-up, once torch is imported (importing torch from
  whichever thread starts first would change the program); `guard.call()` runs it otherwise;
* a thread's first compiled call on a device runs the per-device set-up there (`guard.bind_inputs`:
  cublas-handle-init), as the trainer does when its thread binds its device;
* `torch.compile` returns a callable whose every call is inside `guard.call()` (a compiled module
  keeps its class's attributes: it gets a subclass with a guarded `__call__`); with
  graph-isolation each thread compiles its own copy of a plain function;
* FX's `Tracer.trace` and `torch._dynamo.reset` run inside `guard.call()`, so global-lock also
  holds the tracer and the resetter, the other party of F2/F3/R4 and R5.

What it cannot reach: eager module calls under a tracer that no trace call encloses (R4 needs the
tracer locked, which it is), compiled callables made before `install` (none: it runs first), and
policy fixes, which act only in code that reads them (the trainer): those are refused.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from typing import Any

from harness.faults.points import on_module_loaded
from harness.runtime.guard import Guard, GuardError

ENV_FIXES = "HARNESS_FIXES"


def install(names: str) -> Guard:
    """Build the guard for `names` ("a,b"; "none" for none) and hook it in; GuardError for a name
    that is not a fix or is a policy."""
    guard = Guard(names)
    if guard.policies:
        raise GuardError(
            f"{', '.join(guard.policies)}: policy fixes act only in a program that reads them "
            "(the trainer); --fix takes the fixes with hooks"
        )
    if not guard.names:
        return guard
    _hook_threads(guard)
    on_module_loaded("torch", lambda torch: _hook_compile(guard, torch))
    on_module_loaded("torch", lambda torch: guard.process_start())  # acts only in the main thread
    on_module_loaded("torch.fx._symbolic_trace", lambda mod: _guard_method(guard, mod.Tracer, "trace"))
    on_module_loaded("torch._dynamo", lambda mod: _guard_function(guard, mod, "reset"))
    return guard


def _hook_threads(guard: Guard) -> None:
    original = threading.Thread._bootstrap_inner

    def bootstrap_inner(self: threading.Thread) -> None:
        if "torch" in sys.modules:
            try:
                guard.enter_thread(self.name)
            except Exception as e:  # a set-up that fails must show, not kill the thread silently
                print(
                    f"harness --fix: thread set-up failed in {self.name}: {type(e).__name__}: {e}",
                    file=sys.stderr,
                    flush=True,
                )
        original(self)

    threading.Thread._bootstrap_inner = bootstrap_inner


def _hook_compile(guard: Guard, torch: Any) -> None:
    original = torch.compile
    isolate = guard.active("graph-isolation")

    @functools.wraps(original)
    def compile(model: Any = None, **options: Any) -> Any:
        if model is None:  # @torch.compile(backend=...) decorator form
            return lambda fn: compile(fn, **options)
        if isolate and isinstance(model, (types.FunctionType, types.MethodType)):
            return _per_thread(guard, model, lambda fn: original(fn, **options))
        return guarded(guard, original(model, **options), torch)

    torch.compile = compile


def guarded(guard: Guard, compiled: Any, torch: Any) -> Any:
    """`compiled` with every call inside guard.call()."""
    if isinstance(compiled, torch.nn.Module):
        cls = type(compiled)
        sub = type(
            f"Guarded{cls.__name__}",
            (cls,),
            {"__call__": lambda self, *a, **k: _call(guard, super(sub, self).__call__, a, k, owner=self)},
        )
        compiled.__class__ = sub
        return compiled

    @functools.wraps(compiled)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _call(guard, compiled, args, kwargs)

    return call


def _call(guard: Guard, fn: Any, args: tuple, kwargs: dict, owner: Any = None) -> Any:
    # Keyed by the compiled callable (a compiled module, not its per-call bound __call__) and the
    # inputs' signature: phase-lock runs a key's first calls alone and later ones side by side.
    guard.bind_inputs((*args, *kwargs.values()))
    with guard.call(guard.key(fn if owner is None else owner, args, kwargs)):
        return fn(*args, **kwargs)


def _per_thread(guard: Guard, fn: Any, compile_one: Any) -> Any:
    local = threading.local()

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        mine = getattr(local, "fn", None)
        if mine is None:
            mine = local.fn = compile_one(guard._fixes.isolate(fn))
        return _call(guard, mine, args, kwargs)

    return call


def _guard_method(guard: Guard, owner: type, name: str) -> None:
    original = owner.__dict__[name]

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        with guard.call():  # no key: a trace or reset always runs alone under phase-lock
            return original(*args, **kwargs)

    setattr(owner, name, method)


def _guard_function(guard: Guard, module: Any, name: str) -> None:
    original = getattr(module, name)

    @functools.wraps(original)
    def function(*args: Any, **kwargs: Any) -> Any:
        with guard.call():  # no key: a trace or reset always runs alone under phase-lock
            return original(*args, **kwargs)

    setattr(module, name, function)
