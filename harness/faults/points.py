"""Named injection points inside torch, and the wrappers that call the scheduler at them.

A point is a name (`fx.trace`) plus candidate targets `"module:Qual.attr"`, tried in order; the
first that resolves in the installed torch is wrapped and recorded, the rest are alternatives for
other torch versions. A point none of whose targets resolves is reported unavailable, never a crash.

Key properties:
- Lazy: `install_lazily` wraps a target right after its module finishes executing (an import hook),
  so nothing is imported early and later `from module import f` statements already see the
  wrapper. This sidesteps an import-order trap (importing `_aot_autograd.runtime_wrappers`
  before `torch._dynamo` raises a circular ImportError).
- Patches are made where lookups happen at call time (class attributes, module globals used by
  their own module); functions imported by name into other modules earlier cannot be reached.
- `uninstall_all()` restores every original (tests).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

Hook = Callable[[str, str], None]
"""hook(point, when): when is "before" the call, "after" it returned, or "raise" when it (or a
hook before it) raised. A point may carry several hooks (the fault plan's, the exposure probes'):
"before" runs them in the order installed, "after" and "raise" in reverse, as nested `with`
blocks would, so a later hook's region sits inside an earlier hook's delays."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    name: str
    """`area.event` name used in plans."""
    targets: tuple[str, ...]
    """Candidate `module:Qual.attr` targets, tried in order (newest torch first)."""
    why: str
    """Why this point is on the race path, with the evidence."""


# The race-path points, each with the race it widens (ids: docs/glossary.md). Hit counts on
# torch 2.13 CPU show each is reached there except the cudagraph ones, which need CUDA.
TORCH_POINTS: dict[str, Point] = {
    p.name: p
    for p in (
        Point(
            name="fx.trace",
            targets=("torch.fx._symbolic_trace:Tracer.trace",),
            why="sets the process-global _is_fx_tracing_flag and patches nn.Module.__call__ for "
            "the whole trace (F2, F3, R1-R4); a sleep here took R1 from 1/10 to 5/10 (2.13 CPU)",
        ),
        Point(
            name="fx.create_node",
            targets=("torch.fx.graph:Graph.create_node",),
            why="runs inside every trace while the FX flag is live; sleeps here took R1 to "
            "10/10 (2.13 CPU), the most effective lever found",
        ),
        Point(
            name="fx.call_module",
            targets=("torch.fx._symbolic_trace:Tracer.call_module",),
            why="where every module call lands while a trace has nn.Module.__call__ patched, "
            "in any thread: another thread's eager call raising 'module is not installed as a "
            "submodule' (R4, PR #187589); hit only during symbolic_trace",
        ),
        Point(
            name="make_fx.dispatch_trace",
            targets=("torch.fx.experimental.proxy_tensor:dispatch_trace",),
            why="make_fx entry used by AOTAutograd/Inductor during a compile; its Tracer.trace "
            "is what interleaves with user symbolic_trace to leave the flag stuck (R2)",
        ),
        Point(
            name="dynamo.convert_frame",
            targets=("torch._dynamo.convert_frame:CatchErrorsWrapper.__call__",),
            why="runs after the C++ cache lookup and before compile_lock is taken: widens the "
            "lookup -> lock window behind duplicate compiles (R7/F10)",
        ),
        Point(
            name="inductor.compile_fx",
            targets=(
                "torch._inductor.compile_fx:fx_codegen_and_compile",
                "torch._inductor.compile_fx:compile_fx",
            ),
            why="Inductor lowering + codegen of one graph (F7); hit once per graph",
        ),
        Point(
            name="aot.backward_compile",
            targets=(
                "torch._functorch._aot_autograd.runtime_wrappers:_AutogradBackwardCompiler.get_or_compile",
                # Older torch (2.11) compiles lazily inside a per-graph CompiledFunction class;
                # the one module global it calls there and only there is this context-manager
                # factory, so the hook fires as that compile starts ("after" = CM created).
                "torch._functorch._aot_autograd.runtime_wrappers:track_graph_compiling",
            ),
            why="lazy first-backward compile, outside compile_lock for aot_eager (F8); "
            "2.13: hit on every backward, compiles on the first; 2.11: hit on the compile only",
        ),
        Point(
            name="cudagraph.get_container",
            targets=("torch._inductor.cudagraph_trees:get_container",),
            why="per-thread TLS container lookup behind the CUDAGraph Trees assertion (F1); "
            "importable on CPU, only exercised with CUDA",
        ),
        Point(
            name="cudagraph.record",
            targets=(
                "torch._inductor.cudagraph_trees:CUDAGraphTreeManager.record_function",
                "torch._inductor.cudagraph_trees:CUDAGraphNode.__init__",
            ),
            why="graph recording, with no lock around the manager's runtime (F1c/F1d)",
        ),
        Point(
            name="cudagraph.run",
            targets=("torch._inductor.cudagraph_trees:CUDAGraphTreeManager.run",),
            why="every call of a cudagraph-tree function (warm-up, record or replay) goes through its "
            "manager's run: two threads inside one tree's runs share its pool and its current node "
            "(F1c, recording or replaying)",
        ),
        Point(
            name="compiled.call",
            targets=(
                "torch._dynamo.eval_frame:is_fx_symbolic_tracing",
                "torch.fx._symbolic_trace:is_fx_symbolic_tracing",
            ),
            why="the check every compile_wrapper call makes before entering compiled code "
            "(eval_frame.py compile_wrapper; 2.13 binds it at torch.compile() time from "
            "torch.fx._symbolic_trace, older versions import it into eval_frame): the exact "
            "read that raises F2/R1",
        ),
        Point(
            name="dynamo.reset",
            targets=("torch._dynamo:reset",),
            why="reset() under compile_lock while other threads run cache lookup without it: "
            "the R5 segfault and R6 NameError",
        ),
    )
}


# Imported first by `install_now` so that runtime_wrappers resolves (the import-order trap above).
PRELOAD = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx")


@dataclass(kw_only=True, slots=True)
class _Patch:
    owner: object
    attr: str
    original: object
    target: str
    hooks: list[Hook]
    """Read by the wrapper at each call, so a hook added later reaches an installed point."""


_lock = threading.Lock()
_patches: dict[str, _Patch] = {}
_unavailable: dict[str, str] = {}
HITS: Counter[str] = Counter()


def installed() -> dict[str, str]:
    """Point name -> the target that was wrapped."""
    return {name: p.target for name, p in _patches.items()}


def unavailable() -> dict[str, str]:
    """Point name -> why none of its targets resolved (only after install_now)."""
    return dict(_unavailable)


def _split(target: str) -> tuple[str, list[str]]:
    module, _, qual = target.partition(":")
    return module, qual.split(".")


def _resolve(target: str) -> tuple[object, str, object]:
    """(owner, attr, raw attribute) for a target whose module is imported; raises on failure."""
    module_name, parts = _split(target)
    owner: object = sys.modules.get(module_name) or importlib.import_module(module_name)
    for part in parts[:-1]:
        owner = getattr(owner, part)
    attr = parts[-1]
    # Read the raw attribute from the class dict so staticmethod/classmethod are kept as such.
    raw = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    return owner, attr, raw


def _make_wrapper(name: str, raw: object, hooks: list[Hook]) -> object:
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if kind is not None else raw
    if not callable(fn):
        raise TypeError(f"{name}: target is not callable ({type(fn).__name__})")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        HITS[name] += 1
        try:
            for hook in hooks:
                hook(name, "before")
            result = fn(*args, **kwargs)
        except BaseException:
            # A region a hook opened must close when the call raises (an R4 trace that fails,
            # a fault the plan raised), or it would read as open for the rest of the run.
            for hook in reversed(hooks):
                hook(name, "raise")
            raise
        for hook in reversed(hooks):
            hook(name, "after")
        return result

    wrapper.__harness_point__ = name
    return kind(wrapper) if kind is not None else wrapper


def _install_target(name: str, target: str, hook: Hook) -> bool:
    """Wrap `target` for point `name` (or add `hook` to its wrapper); False if it does not
    resolve. Caller holds _lock."""
    if name in _patches:
        if hook not in _patches[name].hooks:
            _patches[name].hooks.append(hook)
        return True
    try:
        owner, attr, raw = _resolve(target)
    except (ImportError, AttributeError, KeyError):
        return False
    hooks = [hook]
    setattr(owner, attr, _make_wrapper(name, raw, hooks))
    _patches[name] = _Patch(owner=owner, attr=attr, original=raw, target=target, hooks=hooks)
    return True


def install_now(names: list[str], hook: Hook) -> dict[str, str]:
    """Import torch's compile stack and wrap the named points now; returns installed()."""
    for module in PRELOAD:
        importlib.import_module(module)
    with _lock:
        for name in names:
            point = TORCH_POINTS[name]
            if not any(_install_target(name, t, hook) for t in point.targets):
                _unavailable[name] = f"none of {', '.join(point.targets)} exists"
    return installed()


def uninstall_all() -> None:
    """Restore every wrapped original, drop the installs still waiting for their module and
    forget hit counts (tests; the exposure-cost benchmark's rounds without probes)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _LoadWatcher)]
    with _lock:
        for patch in _patches.values():
            setattr(patch.owner, patch.attr, patch.original)
        _patches.clear()
        _unavailable.clear()
        HITS.clear()
        _stage_handlers.clear()


class _LoadWatcher(importlib.abc.MetaPathFinder):
    """Calls `on_loaded(module_name)` right after a watched module finishes executing.

    It never supplies a module itself: it asks the remaining finders for the real spec and wraps
    that loader's exec_module. Unwatched names cost one set lookup.
    """

    def __init__(self, watched: set[str], on_loaded: Callable[[str], None]) -> None:
        self.watched = watched
        self.on_loaded = on_loaded

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.watched:
            return None
        self.watched.discard(fullname)
        spec = _find_spec_after(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader, self.on_loaded)
        return spec


def _find_spec_after(finder: object, fullname: str, path, target):
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, inner, on_loaded: Callable[[str], None]) -> None:
        self.inner = inner
        self.on_loaded = on_loaded

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.on_loaded(module.__name__)

    def __getattr__(self, item):  # get_code, get_source, is_package, ... for tracebacks
        return getattr(self.inner, item)


def install_lazily(names: list[str], hook: Hook) -> None:
    """Wrap each named point as soon as a module holding one of its targets is loaded."""
    by_module: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        for target in TORCH_POINTS[name].targets:
            by_module.setdefault(_split(target)[0], []).append((name, target))

    def on_loaded(module_name: str) -> None:
        with _lock:
            for name, target in by_module.get(module_name, ()):
                _install_target(name, target, hook)

    pending = set()
    for module_name in by_module:
        if module_name in sys.modules:
            on_loaded(module_name)
        else:
            pending.add(module_name)
    if pending:
        sys.meta_path.insert(0, _LoadWatcher(pending, on_loaded))


def on_module_loaded(module_name: str, callback: Callable[[object], None]) -> None:
    """Run `callback(module)` once `module_name` is imported (now, if it already is)."""
    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return
    sys.meta_path.insert(0, _LoadWatcher({module_name}, lambda name: callback(sys.modules[name])))


# Several harness parts listen at the program's stage points (the fault plan, the exposure probes),
# but harness.runtime.failpoints takes one external handler: they are composed here, in the order added.
_stage_handlers: list[Callable[[str], None]] = []


def add_stage_handler(handler: Callable[[str], None]) -> None:
    """Call `handler(name)` at every harness.runtime.failpoints stage point, once the program imports it."""
    _stage_handlers.append(handler)
    on_module_loaded("harness.runtime.failpoints", _set_stage_handler)


def _set_stage_handler(module) -> None:
    handlers = tuple(_stage_handlers)
    if len(handlers) == 1:
        module.set_handler(handlers[0])
        return

    def composed(name: str) -> None:
        for handler in handlers:
            handler(name)

    module.set_handler(composed if handlers else None)
