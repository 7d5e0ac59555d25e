"""Fixes for races of multi-threaded torch.compile, usable in any threaded program.

`Guard` puts the named fix strategies of `harness.runtime.fixes` (the registry this project measures its
trainer with) into four hooks that fit a user's own threads::

    from harness.runtime.guard import Guard

    guard = Guard("global-lock")                     # or "nested-fx-fallback,cstash-tls-init", [...]
    guard = Guard.recommended(device="cuda", cudagraphs=True)   # the measured set, see below

    predict = guard.compiled(score, backend="inductor")   # torch.compile + the per-call fixes
    # or, for something torch.compile'd already:  predict = guard.compiled(torch.compile(score))

    @guard.thread                                   # per-thread set-up, once per thread
    def worker(requests):
        for x in requests:
            predict(x)

    def exporter():
        with guard.call():                          # anything else that races: traces, resets,
            torch.fx.symbolic_trace(model)          # forward + backward of a training step

    threading.Thread(target=worker, args=(reqs,), name="worker-0").start()
    print(guard.counts())                           # {'global-lock': 512}: how often each fix acted

The hooks:

* `@guard.thread` (or `guard.enter_thread()`): the fixes' per-thread set-up (cudagraph-trees TLS,
  per-thread Dynamo config), with the thread's name as role. It runs once per thread however
  often the body is called (a `ThreadPoolExecutor` task may be decorated), and again in a thread
  that enters a fresh `contextvars` context, because torch 2.13 keeps config overrides in a
  ContextVar that a new thread or context does not inherit (F14). `guard.call()` and
  `guard.compiled` run it too if the thread has not, so a forgotten decorator costs nothing.
* `guard.call()`: context manager for one compiled call, or forward + backward, or anything that
  must not overlap with compiled calls (with global-lock: held for the whole block).
* `guard.compiled(fn, **torch_compile_options)`: `torch.compile(fn)` whose every call is in
  `guard.call()`. With graph-isolation, each thread compiles its own copy of `fn` (a fresh code
  object, so a cache and recompile limit of its own); it then needs the plain function or bound
  method, not an already compiled callable or an `nn.Module` (pass `model.forward`).
* `guard.on_device(device)`: call after a thread binds its CUDA device (cublas-handle-init).
* `guard.counts()`, `guard.describe()`, `guard.active(name)`, `guard.note(name)`.

Which fix for which race (F-, R- and G-numbers: the race catalogue, harness/diagnosis/races.toml,
defined in docs/glossary.md; rNN: repro/ scripts and their measured rates in repro/README.md):

======================  ====================================================================
global-lock             One process-wide lock around every guarded call. Holds wherever every
                        party of a race is under it: compiled calls vs another thread's
                        `torch.fx.symbolic_trace`/`make_fx` (F2/R1, r06; flag stuck R2, r14;
                        `CURRENT_PATCHER` F3/R3, r07), plain eager module calls vs a tracer
                        (R4, r15: `NameError: module is not installed as a submodule`),
                        `torch._dynamo.reset()` vs compiled calls (segfault R5, r16), eager Adam
                        during a compile (R8, r18), concurrent CUDA graph recording (F1d), a dict
                        argument mutated by another thread mid-trace (pytorch#196208, r27). Put
                        the tracer / resetter / mutator under `guard.call()` too, or it does not
                        hold. Threads started inside a guarded call (a pool its compile
                        waits on, pytorch#168042) count as part of it while it lasts: they run
                        one at a time beside it instead of waiting for it.
                        Cost: guarded calls no longer overlap.
phase-lock              global-lock for the phases that race only: a key's (callable and input
                        signature's) first 3 calls run alone (trace, compile, lazy backward,
                        CUDA-graph warm-up and recording), later calls side by side; a trace or
                        reset under `guard.call()` (no key) always runs alone. Measured on the
                        CPU trainer against r19: 0/39, as global-lock, priced 1.17x it.
nested-fx-fallback      `torch._dynamo.config.error_on_nested_fx_trace = False` in each thread
                        (per thread: F14). A compiled call made while ANOTHER thread is inside
                        FX tracing then runs the original function EAGERLY instead of raising
                        `RuntimeError: Detected that you are using FX to symbolically trace a
                        dynamo-optimized function` (F2/R1, r06, pytorch#126024). It avoids the
                        window rather than surviving it: those calls lose compilation, and it
                        does nothing for compiled modules or eager module calls under a tracer
                        (R4, r15), for compiles that overlap a trace (R2/R3), or for resets.
                        It also silences the legitimate single-thread error.
cstash-tls-init         CUDA graph trees' per-thread containers + the C TLS stash seeded in each
local-tls-init          thread (F1/F1b, pytorch#123177): needed on builds whose fresh threads
                        assert in `cudagraph_trees.get_obj` (2.11); 2.13 seeds them lazily
                        (PR #184357). Run `python -m harness doctor` to see which you have.
stash-incref            `torch._C._stash_obj_in_tls` keeps a reference it did not take on some
                        builds (r22: double free when a stashing thread exits); patched once,
                        a no-op where the binding increfs (measured on 2.13).
await-thread-exit       Interpreter exit waits until every guarded thread has left the OS: a
                        thread that ran `reduce-overhead` (2.13+) or cstash-tls-init drops its
                        C TLS stash after join() returns, and during finalization that kills
                        the process (SIGABRT `terminate called without an active exception`,
                        or SIGSEGV; r26). Costs only the wait at exit (5 s at most; Linux).
                        cstash-tls-init does it for the threads it stashes in.
thread-local-stance     global-lock, plus `set_stance(skip_guard_eval_unsafe=True)` read per
                        thread: on 2.13 one thread inside that stance makes every thread's
                        compiled calls skip guards, silently wrong results (r28, PR #196637);
                        global-lock alone does not help (the stance is a module global).
cudagraph-lock          Serialises CUDAGraphTreeManager.run (record/warm-up/replay; F1c/F1d),
                        the narrow form of PR #184357's graph_capture_lock. Candidate.
single-thread-autograd  Backward on the calling thread (F1 via backward, lazy backward compile
                        on the autograd thread F8).
cublas-handle-init      `guard.on_device(dev)` makes the thread's cuBLAS handle before capture.
graph-isolation         A Dynamo cache per thread via `guard.compiled` (duplicate compiles and a
                        shared recompile limit, F10/R7, r11/r17).
policies                sequential-startup, thread-local-warmup, persistent-buffers,
                        target-hook-taps, stream-sync have no hook: `guard.policies` lists the
                        ones you asked for and your code acts on them (`guard.note(name)`
                        counts). E.g. sequential-startup: warm every model up one thread at a
                        time before going concurrent (F7, F8, F10).
======================  ====================================================================

`Guard.recommended(device=..., cudagraphs=...)` takes the set `harness.runtime.fixes.recommended_sets.recommended` measured
clean for the project's trainer on that device kind (a prediction, labelled so in
`guard.recommendation.line()`, when the installed torch is not the measured one). It was measured
on a trainer, not on your program: on CPU it is a policy only (target-hook-taps) and does not
cover the races above; name the fixes yourself where your program has them.

A name that is not a fix is one `GuardError` (a ValueError) listing the valid names. Nothing here
imports torch until a fix or `compiled` needs it. `examples/serve_while_tracing.py` is a worked
example (fails raw on CPU torch 2.13, clean with global-lock or nested-fx-fallback).
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

from harness.runtime.errors import ConfigError
from harness.runtime.fixes import FIXES, FixSet, Policy, call_key
from harness.runtime.fixes.fixset import plain_tensor
from harness.runtime.fixes.recommended_sets import Recommendation, recommended

F = TypeVar("F", bound=Callable[..., Any])

DEVICE_KINDS = ("cpu", "cuda")


class GuardError(ConfigError):
    """A fix name that is not in the registry, an unknown device kind, or a callable a fix cannot
    handle (graph-isolation needs the plain function)."""


def fix_names() -> tuple[str, ...]:
    """Every fix name `Guard` accepts, in registry order."""
    return tuple(FIXES)


def parse_fixes(fixes: str | Iterable[str] | None) -> tuple[str, ...]:
    """Names from "a,b", ["a", "b"] or ["a,b", "c"]; None, "" and "none" mean no fix. Duplicates
    are dropped, order kept. All unknown names are reported in one GuardError."""
    if fixes is None:
        return ()
    items = [fixes] if isinstance(fixes, str) else list(fixes)
    if not all(isinstance(item, str) for item in items):
        raise GuardError(f"fix names must be strings, got {fixes!r}")
    names = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if names == ["none"]:
        return ()
    unknown = [n for n in dict.fromkeys(names) if n not in FIXES]
    if unknown:
        described = ", ".join(_with_hint(n) for n in unknown)
        noun = "fix" if len(unknown) == 1 else "fixes"
        raise GuardError(f"unknown {noun} {described}; valid fixes: {', '.join(FIXES)}")
    return tuple(dict.fromkeys(names))


def _with_hint(name: str) -> str:
    close = difflib.get_close_matches(name.replace("_", "-").lower(), FIXES, n=1)
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


class Guard:
    """The active fixes of one program, with thread, call and compile hooks; thread-safe."""

    def __init__(self, fixes: str | Iterable[str] | None = (), *, recommendation: Recommendation | None = None) -> None:
        self.names: tuple[str, ...] = parse_fixes(fixes)
        self.recommendation = recommendation
        self._fixes = FixSet(FIXES[n] for n in self.names)
        self._local = threading.local()
        # Marks the contextvars context the set-up ran in: config fixes live in torch's ContextVar
        # overrides (F14), so a new context in a started thread needs them again.
        self._context_mark: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"harness.runtime.guard.started.{id(self):x}", default=False
        )
        if "torch" in sys.modules:  # built after torch's import, as programs do: pin what needs the main thread
            self.process_start()

    @classmethod
    def recommended(cls, device: Any = "cpu", *, cudagraphs: bool = False, torch_version: str | None = None) -> Guard:
        """The registry's recommended set for this device kind and CUDA-graph use, on the installed
        torch (or `torch_version`); see the module docstring for what it was measured on."""
        kind = str(getattr(device, "type", device)).split(":")[0]
        if kind not in DEVICE_KINDS:
            raise GuardError(f"unknown device {device!r}: recommended() knows {', '.join(DEVICE_KINDS)}")
        if cudagraphs and kind != "cuda":
            raise GuardError("cudagraphs=True needs device='cuda' (CUDA graphs record CUDA work only)")
        if torch_version is None:
            # importing harness.runtime.guard stays cheap: torch loads when a guard is built
            import torch

            torch_version = torch.__version__
        rec = recommended(torch_version, kind, cudagraphs=cudagraphs)
        return cls(rec.names, recommendation=rec)

    # -- introspection ------------------------------------------------------------------------

    @property
    def policies(self) -> tuple[str, ...]:
        """The named fixes that are policies: no hook, the program acts on them."""
        return tuple(n for n in self.names if isinstance(FIXES[n], Policy))

    def active(self, name: str) -> bool:
        """Whether fix `name` is on; an unknown name is a GuardError (a typo must not read False)."""
        parse_fixes(name)
        return name in self.names

    def note(self, name: str, n: int = 1) -> None:
        """Count that your code acted on fix `name` (for policies)."""
        if self.active(name):
            self._fixes.note(name, n)

    def counts(self) -> dict[str, int]:
        """How often each fix acted so far: thread set-ups, guarded calls, isolated compiles."""
        # A dict copy is atomic under the GIL; FixSet's writers hold its lock.
        return dict(self._fixes.counts)

    def describe(self) -> str:
        """One line: each fix and how often it acted, policies marked."""
        if not self.names:
            return "guard: no fixes"
        counts = self.counts()
        parts = [
            f"{n} (policy: acted on {counts[n]}x)" if n in self.policies else f"{n} ({counts[n]}x)" for n in self.names
        ]
        return "guard: " + ", ".join(parts)

    def __repr__(self) -> str:
        return f"Guard({','.join(self.names)!r})"

    # -- hooks --------------------------------------------------------------------------------

    def process_start(self) -> None:
        """The fixes that act once from the main thread before the workers start
        (pin-fake-cuda-guard); a no-op elsewhere. The constructor calls it when torch is imported."""
        self._fixes.process_start()

    def enter_thread(self, role: str | None = None) -> bool:
        """Run the fixes' per-thread set-up unless this thread (and context) already has; returns
        whether it ran. The role is the thread's name unless given."""
        if getattr(self._local, "started", False) and self._context_mark.get():
            return False
        self._fixes.thread_start(role or threading.current_thread().name)
        self._local.started = True
        self._context_mark.set(True)
        return True

    @overload
    def thread(self, fn: F, /) -> F: ...

    @overload
    def thread(self, *, role: str | None = None) -> Callable[[F], F]: ...

    def thread(self, fn: Callable[..., Any] | None = None, /, *, role: str | None = None) -> Any:
        """Decorator for a thread body (`@guard.thread` or `@guard.thread(role="loader")`): the
        per-thread set-up runs first, once per thread."""

        def decorate(body: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(body)
            def guarded_body(*args: Any, **kwargs: Any) -> Any:
                self.enter_thread(role)
                return body(*args, **kwargs)

            return guarded_body

        return decorate if fn is None else decorate(fn)

    def on_device(self, device: Any) -> None:
        """Per-device set-up; call right after the thread binds its device."""
        self.enter_thread()
        self._fixes.on_device(device)

    def bind_inputs(self, args: Iterable[Any]) -> None:
        """The per-device set-up for each device a call's plain tensor inputs are on, once per thread
        and device. An unmodified program never says which device its thread binds; its inputs do,
        before a first call that may record a CUDA graph (cublas-handle-init). Proxies and fake
        tensors are not read (their attributes record nodes or run user code)."""
        torch = sys.modules.get("torch")
        if not self._fixes.device_fixes or torch is None:
            return
        seen = self._local.__dict__.setdefault("devices", set())
        for a in args:
            if plain_tensor(a, torch) and a.device not in seen:
                seen.add(a.device)
                self.on_device(a.device)

    @contextlib.contextmanager
    def call(self, key: Any = None) -> Iterator[None]:
        """Context manager around one compiled call (or forward + backward, or a trace/reset that
        must not overlap with compiled calls). `key` (harness.runtime.fixes.call_key) names the callable
        and its input signature for phase-lock, which runs a key's first calls alone and later
        ones concurrently; without a key a call always runs alone."""
        self.enter_thread()
        with self._fixes.around_call(key):
            yield

    def key(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """The call key of `fn(*args, **kwargs)` for keyed fixes (call_key); None, without reading the
        arguments, when no keyed fix is active."""
        return call_key(fn, *args, *kwargs.values()) if self._fixes.keyed else None

    @overload
    def compiled(self, fn: F, /, **options: Any) -> GuardedCallable: ...

    @overload
    def compiled(self, /, **options: Any) -> Callable[[F], GuardedCallable]: ...

    def compiled(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """`torch.compile(fn, **options)` with every call inside `guard.call()`; also a decorator
        (`@guard.compiled` or `@guard.compiled(backend="eager")`). An already compiled callable is
        wrapped as it is (no options then)."""
        if fn is None:
            return lambda f: GuardedCallable(self, f, options)
        return GuardedCallable(self, fn, options)


def _is_compiled(fn: Any) -> bool:
    # torch.compile's function wrapper and OptimizedModule both carry the original callable.
    return hasattr(fn, "_torchdynamo_orig_callable")


class GuardedCallable:
    """What `Guard.compiled` returns: call it like the function."""

    def __init__(self, guard: Guard, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        if not callable(fn):
            raise GuardError(f"compiled() needs a callable, got {type(fn).__name__}")
        already = _is_compiled(fn)
        if already and options:
            raise GuardError(
                "compiled(): fn is already torch.compile'd; pass the plain function "
                f"to give compile options ({', '.join(sorted(options))})"
            )
        self.guard = guard
        self.isolated = guard.active("graph-isolation")
        if self.isolated and (already or not isinstance(fn, (types.FunctionType, types.MethodType))):
            what = "an already compiled callable" if already else type(fn).__name__
            raise GuardError(
                f"graph-isolation compiles a copy of fn per thread and needs the plain function or "
                f"bound method (for a module: model.forward), got {what}"
            )
        self._fn = fn
        self._options = dict(options)
        self._per_thread = threading.local()
        self._shared: Callable[..., Any] | None = None
        if not self.isolated:
            self._shared = fn if already else _compile(fn, self._options)
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(fn, attr):
                setattr(self, attr, getattr(fn, attr))
        self.__wrapped__ = fn

    def for_this_thread(self) -> Callable[..., Any]:
        """The compiled callable this thread calls (its own copy under graph-isolation)."""
        if self._shared is not None:
            return self._shared
        mine = getattr(self._per_thread, "fn", None)
        if mine is None:
            mine = self._per_thread.fn = _compile(self.guard._fixes.isolate(self._fn), self._options)
        return mine

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.guard.enter_thread()  # the thread's fixes before its first compiled callable
        fn = self.for_this_thread()
        self.guard.bind_inputs((*args, *kwargs.values()))
        with self.guard.call(self.guard.key(fn, args, kwargs)):
            return fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<guarded {getattr(self._fn, '__qualname__', self._fn)!r} under {self.guard!r}>"


def _compile(fn: Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    # importing harness.runtime.guard stays cheap: torch loads when a guard is built
    import torch

    return torch.compile(fn, **options)
