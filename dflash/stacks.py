"""Where each thread is now: its innermost meaningful frame, and whether it is compiling.

Read from `sys._current_frames()` (no signal, no ptrace: works while every other thread is stuck,
as long as this one gets the GIL). "Meaningful" skips the standard library and a few helper
layers (sympy, context-manager and timing decorators), so a thread in Inductor's sympy
simplification reads `torch._inductor.codegen.simd:join_dimensions`, not `sympy.core.cache`.

A stack holding a Dynamo trace, an Inductor compile (forward, or the lazy backward compile on the
first backward), an autotune or a Triton kernel build is *compiling*: a stall there may be slow
serialised compiles rather than a deadlock, so callers report the frames and leave the verdict to
whoever reads the dump.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from dataclasses import dataclass

_STDLIB = tuple(
    {os.path.normcase(os.path.realpath(sysconfig.get_paths()[k])) + os.sep for k in ("stdlib", "platstdlib")}
)
HELPER_MODULES = (
    "sympy",
    "mpmath",
    "torch.utils._sympy",
    "torch.utils._contextlib",
    "torch._dynamo.utils",
    "torch._utils_internal",
    "torch._strobelight",
    "tqdm",
)
"""Modules whose frames never say where a thread is, only how it got there."""
COMPILE_MODULES = (
    "torch._dynamo.convert_frame",
    "torch._dynamo.symbolic_convert",
    "torch._inductor.compile_fx",
    "torch._inductor.select_algorithm",
    "torch._inductor.autotune_process",
    "torch._inductor.async_compile",
    "triton.compiler",
)
"""A frame of one of these on the stack means a compile is in progress (Dynamo trace, Inductor
compile, max-autotune benchmarking, Triton kernel build)."""
COMPILE_FUNCTIONS = {
    ("torch._inductor.runtime.triton_heuristics", f)
    for f in ("precompile", "_precompile_config", "benchmark_all_configs", "autotune_to_one_config")
}
"""Inductor's first-launch autotuning of a kernel runs outside compile_fx, at the first call."""
WAIT_SITES = {
    ("dflash.replicas", "_wait"),
    ("harness.runtime.fixes.global_lock", "enter"),
    ("harness.runtime.fixes.phase_lock", "enter"),
    ("harness.runtime.fixes.cudagraph_trees", "locked_run"),
    ("harness.runtime.fixes", "enter"),
    ("harness.runtime.fixes", "locked_run"),
    ("dflash.fixes", "enter"),
    ("dflash.fixes", "locked_run"),
}
"""Innermost frames of a thread blocked on another one (channels are all of dflash.channel); the
registry's frames under its modules now and under the names it had before (harness.runtime.fixes,
dflash.fixes)."""


@dataclass(frozen=True, slots=True)
class ThreadWhere:
    name: str
    ident: int
    where: str
    """`module:function:line` of the innermost meaningful frame."""
    compiling: bool
    waiting: bool
    """Blocked in a channel, the startup gate, the replica barrier or a fix's lock."""

    def describe(self) -> str:
        return f"{self.name} in {self.where}"


def _module(frame) -> str:
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and name != "__main__":
        return name
    return os.path.splitext(os.path.basename(frame.f_code.co_filename))[0]


def _stdlib(frame) -> bool:
    path = frame.f_code.co_filename
    if path.startswith("<frozen"):
        return True
    path = os.path.normcase(os.path.realpath(path))
    return path.startswith(_STDLIB) and "site-packages" not in path


def _helper(module: str) -> bool:
    return any(module == h or module.startswith(h + ".") for h in HELPER_MODULES)


def _label(frame) -> str:
    return f"{_module(frame)}:{frame.f_code.co_name}:{frame.f_lineno}"


def innermost(frame) -> tuple[str, str, str]:
    """(module, function, label) of the innermost meaningful frame of the stack ending at `frame`."""
    f, fallback = frame, None
    while f is not None:
        if not _stdlib(f):
            if not _helper(_module(f)):
                return _module(f), f.f_code.co_name, _label(f)
            fallback = fallback or f  # innermost non-stdlib frame, if every one is a helper
        f = f.f_back
    fallback = fallback or frame
    return _module(fallback), fallback.f_code.co_name, _label(fallback)


def compiling(frame) -> bool:
    f = frame
    while f is not None:
        mod = _module(f)
        if mod.startswith(COMPILE_MODULES) or (mod, f.f_code.co_name) in COMPILE_FUNCTIONS:
            return True
        f = f.f_back
    return False


def where(name: str, ident: int, frame) -> ThreadWhere:
    mod, func, label = innermost(frame)
    waiting = mod == "dflash.channel" or (mod, func) in WAIT_SITES
    return ThreadWhere(name=name, ident=ident, where=label, compiling=compiling(frame), waiting=waiting)


def snapshot(*, skip: tuple[int, ...] = ()) -> list[ThreadWhere]:
    """Every thread with a Python frame except `skip` (idents), in thread-start order; threads the
    threading module does not know (the autograd engine's device threads running a lazy backward
    compile) are named `thread 0x<ident>`."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    order = {ident: i for i, ident in enumerate(names)}
    out = [
        where(names.get(ident, f"thread {ident:#x}"), ident, frame)
        for ident, frame in frames.items()
        if ident not in skip
    ]
    return sorted(out, key=lambda w: order.get(w.ident, len(order)))


def of_threads(threads: list[threading.Thread]) -> dict[str, str]:
    """`name -> module:function:line` for the given (alive) threads."""
    frames = sys._current_frames()
    return {t.name: innermost(frames[t.ident])[2] for t in threads if t.ident is not None and t.ident in frames}
