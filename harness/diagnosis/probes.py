"""Probes: what the installed torch, Python and CUDA do with threads, each measured in a subprocess.

Each probe is a short Python script run as `sys.executable -c SCRIPT` with a timeout: a probe can
crash (a stash that frees twice, a CUDA driver that aborts) or hang, and the doctor must survive
it and say so. A script prints one line `DOCTOR_FACTS {json}`; anything else (a non-zero exit, a
signal, a timeout, no such line, a fact missing from it) makes each of its facts
`unknown (probe failed: ...)`. Nothing is filled in from a version table.

`PROBES` lists the facts by stable key with one line each; the race catalogue
(`harness.diagnosis.catalogue`) names a key as a race's precondition, read as "truthy here means
the race can happen here". Where the precondition is the negation of a fact, the negated fact has
a key of its own (config_per_thread / config_process_global).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "DOCTOR_FACTS "
ERRORS = "__errors__"
"""Result-line key of {fact: reason} for the parts of a script that failed while the rest answered."""
DEFAULT_TIMEOUT_S = 120.0
REPO_ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = f"""
import json, sys
FACTS, ERRORS = {{}}, {{}}

def part(keys, fn):
    # One part of a script: its facts, or the reason for each of its keys; the rest still answers.
    try:
        FACTS.update(fn())
    except BaseException as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        ERRORS.update({{k: type(e).__name__ + ": " + reason if not isinstance(e, SystemExit) else reason
                       for k in keys}})

def emit(facts=None):
    line = dict(FACTS if facts is None else facts)
    if ERRORS:
        line[{ERRORS!r}] = ERRORS
    print({MARKER!r} + json.dumps(line), flush=True)
"""


@dataclass(frozen=True, slots=True)
class Script:
    """One subprocess probe: the facts it reports and its source."""

    name: str
    facts: tuple[str, ...]
    code: str


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact the doctor reports: stable key, one-line description, the script that measures it,
    and what each value means for threads (which race, which fix)."""

    key: str
    description: str
    script: str
    meaning: Mapping[Any, str]
    """Value -> meaning; the key None holds the meaning for any other value."""

    def meaning_of(self, value: Any) -> str:
        if isinstance(value, bool) and value in self.meaning:
            return self.meaning[value]
        return self.meaning.get(None, "")


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One fact as measured here, or why it could not be."""

    key: str
    script: str
    value: Any = None
    error: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def shown(self) -> str:
        if not self.ok:
            return f"unknown (probe failed: {self.error})"
        return format_value(self.value)


def format_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "none"
    return "none" if value is None else str(value)


class ProbeFailed(Exception):
    """A probe subprocess ended without a result line."""


# -- the scripts ------------------------------------------------------------------------------

_PYTHON = (
    _PRELUDE
    + """
import importlib.util, os, platform, sysconfig
build = " (free-threaded build)" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
FACTS["python_version"] = platform.python_implementation() + " " + platform.python_version() + build

def from_source():
    # No cached bytecode and no leave to write it: every process compiles torch's modules again.
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise SystemExit("torch is not importable")
    cached = os.path.exists(importlib.util.cache_from_source(spec.origin))
    return {"torch_compiled_from_source": not cached and sys.dont_write_bytecode}

part(("torch_compiled_from_source",), from_source)

def kernel_cache():
    # Where the CUDA driver keeps the kernels it compiles from PTX (its default, or CUDA_CACHE_PATH);
    # off, or not writable, every process compiles them again.
    if os.environ.get("CUDA_CACHE_DISABLE") == "1":
        return {"cuda_kernel_cache_off": True}
    path = os.environ.get("CUDA_CACHE_PATH") or os.path.join(os.path.expanduser("~"), ".nv", "ComputeCache")
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # the driver makes the folder where it may
    return {"cuda_kernel_cache_off": not (os.path.isdir(path) and os.access(path, os.W_OK))}

part(("cuda_kernel_cache_off",), kernel_cache)
emit()
"""
)

_TORCH = (
    _PRELUDE
    + """
import torch
# After `import torch`: an extension may turn the GIL back on in a free-threaded build.
gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
cuda = torch.cuda.is_available()
count = torch.cuda.device_count() if cuda else 0
if torch.version.cuda:
    build = "cuda " + torch.version.cuda
elif getattr(torch.version, "hip", None):
    build = "rocm " + torch.version.hip
else:
    build = "cpu"
emit({"torch_version": torch.__version__, "torch_build": build, "cuda_available": cuda,
      "gpu_count": count, "gpu_names": [torch.cuda.get_device_name(i) for i in range(count)],
      "free_threaded": not gil})
"""
)

# Thread A traces a module whose forward waits; the main thread looks at FX's state meanwhile.
_FX = (
    _PRELUDE
    + """
import threading
import torch, torch.fx
import torch.fx._symbolic_trace as st
entered, release = threading.Event(), threading.Event()
own = {}
original_call = torch.nn.Module.__call__

def flag():
    return bool(getattr(st, "_is_fx_tracing_flag", False)) if not hasattr(st, "is_fx_tracing") else st.is_fx_tracing()

class Held(torch.nn.Module):
    def forward(self, x):
        own["flag"] = flag()
        entered.set()
        release.wait(30)
        return x + 1

tracer = threading.Thread(target=lambda: torch.fx.symbolic_trace(Held()))
tracer.start()
if not entered.wait(60):
    raise SystemExit("the tracer thread never reached forward")
seen_flag = flag()
patcher = getattr(st, "CURRENT_PATCHER", None)
patched_call = torch.nn.Module.__call__ is not original_call
release.set()
tracer.join(30)
if not own["flag"]:
    raise SystemExit("the tracing thread itself does not see the tracing flag: nothing to compare")
emit({"fx_tracing_flag_global": seen_flag,
      "current_patcher_global": type(patcher).__name__ == "_Patcher",
      "fx_module_patch_global": patched_call})
"""
)

# Three Dynamo facts in one process (one `import torch._dynamo`, ~3 s of CPU, instead of three);
# each is a part of its own, so one that raises leaves the others' answers.
_DYNAMO = (
    _PRELUDE
    + """
import inspect, threading
import torch, torch._dynamo

def config():
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    mine = getattr(cfg, name) + 123
    setattr(cfg, name, mine)
    if getattr(cfg, name) != mine:
        raise SystemExit("the main thread does not read back its own config value")
    seen = []
    worker = threading.Thread(target=lambda: seen.append(getattr(cfg, name)))
    worker.start()
    worker.join(30)
    setattr(cfg, name, mine - 123)
    return {"config_per_thread": seen[0] != mine, "config_process_global": seen[0] == mine}

def compiling():
    # Thread A compiles (Dynamo, then AOTAutograd's make_fx in the backend); this thread polls
    # is_compiling() through the whole compile. A backend-time reading alone is not enough: 2.13
    # sets the flag for the compile session, older builds may set it elsewhere or never.
    entered, release, done = threading.Event(), threading.Event(), threading.Event()

    def backend(gm, example_inputs):
        entered.set()
        release.wait(30)
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(gm, example_inputs)

    f = torch.compile(lambda x: (x * 2).sin() + 1, backend=backend)

    def run():
        try:
            f(torch.ones(2))
        finally:
            done.set()

    compiler = threading.Thread(target=run)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # poll densely
    polls, seen = 0, False
    compiler.start()
    try:
        while not done.is_set():
            polls += 1
            seen = seen or torch.compiler.is_compiling()
            if entered.is_set() and not release.is_set():
                seen = seen or torch.compiler.is_compiling()
                release.set()
    finally:
        release.set()
        sys.setswitchinterval(previous)
        compiler.join(30)
    if not entered.is_set():
        raise SystemExit("the compiling thread never reached the backend")
    if polls < 100:
        raise SystemExit(f"only {polls} polls during the compile: too few to tell")
    return {"is_compiling_global": seen}

def reset():
    return {"reset_locked": "compile_lock" in inspect.getsource(torch._dynamo.reset)}

part(("config_per_thread", "config_process_global"), config)
part(("is_compiling_global",), compiling)
part(("reset_locked",), reset)
emit()
"""
)

_CUDAGRAPH = (
    _PRELUDE
    + """
import inspect, threading
import torch
import torch._inductor.cudagraph_trees as cgt  # imports on CPU builds too
source = inspect.getsource(cgt)
capture_lock = hasattr(cgt, "graph_capture_lock") and "with graph_capture_lock" in source
impl = inspect.getsource(cgt.cudagraphify_impl)
# The recorded callables live in a closure dict per compiled graph; keyed by thread only if the
# function looks at the thread (PR #184357 describes per-host-thread state).
per_thread_callables = any(s in impl for s in ("get_ident", "current_thread", "threading.local", "local("))
main_dict = cgt.get_obj(cgt.local, "tree_manager_containers")
out = {}

def fresh():
    try:
        out["own"] = cgt.get_obj(cgt.local, "tree_manager_containers") is not main_dict
    except AssertionError:
        out["asserts"] = True

t = threading.Thread(target=fresh)
t.start()
# fresh() stashed in C++ TLS: exiting before its OS thread has dropped that stash aborts the
# probe at interpreter exit (race stash-exit-finalize, repro r26; seen once in CI).
from harness.runtime import thread_exit
thread_exit.join(t, 30)
emit({"cudagraph_trees_capture_lock": capture_lock,
      "cudagraph_trees_per_thread_state": out.get("own") is True,
      "cudagraph_trees_fresh_thread_asserts": out.get("asserts") is True,
      "cudagraph_callables_shared": not per_thread_callables})
"""
)

_STASH = (
    _PRELUDE
    + """
import threading
import torch
from harness.runtime import thread_exit
from harness.runtime.fixes.stash import _stash_steals

def late():
    # Who drops a thread's stash: its Python thread (before join() returns) or its OS thread's C++
    # destructor afterwards, seen from the finaliser as a thread threading no longer knows.
    seen = {}

    class Dropped:
        def __del__(self):
            seen["by"] = threading.current_thread().name

    t = threading.Thread(target=lambda: torch._C._stash_obj_in_tls("doctor_exit_probe", Dropped()),
                         name="doctor-exiter")
    t.start()
    if not thread_exit.join(t, 30):  # also keeps this probe clear of the race it measures
        raise SystemExit("the stashing thread did not leave the OS within 30 s")
    if "by" not in seen:
        raise SystemExit("the stashed object was never dropped")
    return {"stash_dropped_after_join": seen["by"] != "doctor-exiter"}

part(("stash_steals_reference",), lambda: {"stash_steals_reference": _stash_steals(torch._C._stash_obj_in_tls)})
part(("stash_dropped_after_join",), late)
emit()
"""
)

SCRIPTS: tuple[Script, ...] = (
    Script("python", ("python_version", "torch_compiled_from_source", "cuda_kernel_cache_off"), _PYTHON),
    Script(
        "torch", ("torch_version", "torch_build", "cuda_available", "gpu_count", "gpu_names", "free_threaded"), _TORCH
    ),
    Script("dynamo", ("config_per_thread", "config_process_global", "is_compiling_global", "reset_locked"), _DYNAMO),
    Script("fx", ("fx_tracing_flag_global", "current_patcher_global", "fx_module_patch_global"), _FX),
    Script(
        "cudagraph",
        (
            "cudagraph_trees_capture_lock",
            "cudagraph_trees_per_thread_state",
            "cudagraph_trees_fresh_thread_asserts",
            "cudagraph_callables_shared",
        ),
        _CUDAGRAPH,
    ),
    Script("stash", ("stash_steals_reference", "stash_dropped_after_join"), _STASH),
)


def _fact(key: str, description: str, script: str, **meaning: str) -> Fact:
    table: dict[Any, str] = {}
    for name, text in meaning.items():
        table[{"true": True, "false": False, "other": None}[name]] = text
    return Fact(key, description, script, table)


PROBES: tuple[Fact, ...] = (
    _fact("python_version", "Python implementation and version", "python", other="the interpreter the probes ran on"),
    _fact(
        "torch_compiled_from_source",
        "torch has no cached bytecode and Python may not write it (PYTHONDONTWRITEBYTECODE, -B)",
        "python",
        true="every process compiles torch's modules again, each trial process too: `import torch` "
        "took 3.2-3.9 s against 1.8-1.9 s cached on an H100 host; unset PYTHONDONTWRITEBYTECODE and "
        "set PYTHONPYCACHEPREFIX to a writable folder (`harness stress` and `hunt --bytecode-cache DIR` do it for their runs; "
        "`python -m dflash train` and `bench` keep their own under ~/.cache/dflash)",
        false="torch loads from cached bytecode, or writes it on its first import",
    ),
    _fact(
        "cuda_kernel_cache_off",
        "the CUDA driver may not keep the kernels it compiles (CUDA_CACHE_DISABLE=1, or its cache folder not writable)",
        "python",
        true="every process compiles again the kernels shipped only as PTX, each trial process too: cuDNN's "
        "attention took 0.42-0.81 s on its first call against 75 ms from the cache on an H100 host, and a cold "
        "gpu-default run spent 30% of its time outside training against 22%; unset CUDA_CACHE_DISABLE or point "
        "CUDA_CACHE_PATH at a writable folder",
        false="a host's first process compiles such kernels once, for later ones (~/.nv/ComputeCache)",
    ),
    _fact(
        "torch_version",
        "torch.__version__",
        "torch",
        other="fix sets are measured per torch major.minor (see the recommended_* lines)",
    ),
    _fact(
        "torch_build",
        "what torch was built for: cpu, cuda <version> or rocm <version>",
        "torch",
        other="CUDA-graph races (F1*, F9, F11) need a CUDA build and device",
    ),
    _fact(
        "cuda_available",
        "torch.cuda.is_available()",
        "torch",
        true="CUDA-graph races (F1, F1c, F1d, F9, F11) can happen with mode='reduce-overhead'",
        false="no CUDA device: the CUDA-graph races (F1*, F9, F11) cannot happen here",
    ),
    _fact(
        "gpu_count",
        "torch.cuda.device_count() (0 without CUDA)",
        "torch",
        other="threads sharing one GPU share its default RNG generator and allocator (F1d)",
    ),
    _fact("gpu_names", "torch.cuda.get_device_name of each device", "torch", other="the devices"),
    _fact(
        "free_threaded",
        "the GIL is off after `import torch` (sys._is_gil_enabled() is False)",
        "torch",
        true="no GIL: torch.compile's process-global state races far more often (#168042); "
        "Dynamo needs PR #149549 (3.13t)",
        false="the GIL is on: a race needs a thread switch inside a critical section "
        "(sys.setswitchinterval(1e-6) widens it)",
    ),
    _fact(
        "config_per_thread",
        "a torch._dynamo.config value set in the main thread is NOT seen by a new thread",
        "dynamo",
        true="config is per-thread (ContextVar): set config fixes in every thread, e.g. Guard's "
        "@guard.thread (F14, r13)",
        false="config is one process-wide object: a patch in one thread leaks into others (F4, #118260)",
    ),
    _fact(
        "config_process_global",
        "a torch._dynamo.config value set in the main thread IS seen by a new thread",
        "dynamo",
        true="config patches race across threads: dynamic=False can be lost (F4, #118260, r08)",
        false="config patches do not cross threads (but fixes must be set per thread: F14)",
    ),
    _fact(
        "fx_tracing_flag_global",
        "while one thread runs torch.fx.symbolic_trace, another thread sees FX's is-tracing flag",
        "fx",
        true="a compiled call during another thread's trace raises 'Detected that you are using FX "
        "to symbolically trace a dynamo-optimized function' (F2/R1, r06; #126024): global-lock "
        "around both, or nested-fx-fallback",
        false="the flag is per-thread (PR #168999): F2/R1 cannot happen",
    ),
    _fact(
        "current_patcher_global",
        "while one thread traces, another thread sees its torch.fx CURRENT_PATCHER",
        "fx",
        true="two threads' traces (or a trace and a compile) corrupt each other's patches: "
        "'CURRENT_PATCHER is None in finally block' (F3/R3, r07), flag stuck (R2, r14); global-lock",
        false="patchers are per-thread (PR #187589): F3 cannot happen",
    ),
    _fact(
        "fx_module_patch_global",
        "while one thread traces, nn.Module.__call__ is patched for every thread",
        "fx",
        true="plain eager module calls in other threads go through the tracer: 'NameError: module is "
        "not installed as a submodule' (R4, r15); only global-lock around both holds",
        false="module patches stay in the tracing thread (PR #187589): R4 cannot happen",
    ),
    _fact(
        "is_compiling_global",
        "while one thread compiles, another thread's torch.compiler.is_compiling() reads True (polled)",
        "dynamo",
        true="eager code in other threads takes compile-only paths during any compile: eager Adam not "
        "bitwise reproducible (R8, r18), transformers' output capture (r19); global-lock or "
        "compile before going concurrent",
        false="is_compiling() is per-thread: R8/r19 cannot happen",
    ),
    _fact(
        "cudagraph_trees_capture_lock",
        "cudagraph_trees.py serialises capture and pool warm-up with graph_capture_lock (source read)",
        "cudagraph",
        true="concurrent captures are serialised inside torch (PR #184357): less need for cudagraph-lock",
        false="nothing serialises captures across threads: F1c/F1d capture errors; cudagraph-lock or global-lock",
    ),
    _fact(
        "cudagraph_trees_per_thread_state",
        "a fresh thread's cudagraph_trees.get_obj returns containers of its own (no assertion)",
        "cudagraph",
        true="each thread gets its own tree manager lazily (PR #184357): no TLS seeding needed for F1",
        false="fresh threads have no tree-manager containers: see cudagraph_trees_fresh_thread_asserts",
    ),
    _fact(
        "cudagraph_trees_fresh_thread_asserts",
        "a fresh thread's cudagraph_trees.get_obj raises AssertionError (is_key_in_tls)",
        "cudagraph",
        true="reduce-overhead in a new thread asserts (F1, #123177): cstash-tls-init in every thread",
        false="no F1 assertion in fresh threads",
    ),
    _fact(
        "cudagraph_callables_shared",
        "cudagraphify_impl caches recorded callables per graph, not per thread (source read)",
        "cudagraph",
        true="threads calling one compiled graph share one recording and its memory pool (F1c): give "
        "each thread its own graph (graph-isolation) or serialise (global-lock)",
        false="recorded callables are kept per thread",
    ),
    _fact(
        "stash_steals_reference",
        "torch._C._stash_obj_in_tls keeps a reference it did not take (measured on a fresh object)",
        "stash",
        true="a thread that stashes and exits frees the object twice (r22; heap corruption, SIGSEGV): stash-incref",
        false="the binding takes its own reference: stash-incref is a no-op here",
    ),
    _fact(
        "stash_dropped_after_join",
        "a thread's C stash is dropped by its C++ destructor after join() has returned (measured)",
        "stash",
        true="a program that exits right after joining such threads can die at exit (SIGABRT, "
        "'terminate called without an active exception'; r26) on Python <= 3.13: await-thread-exit",
        false="the stash is dropped before join() returns",
    ),
    _fact(
        "reset_locked",
        "torch._dynamo.reset() takes convert_frame.compile_lock (source read)",
        "dynamo",
        true="reset waits for compiles, but compiled calls and cache lookups take no lock: a reset "
        "while another thread runs compiled code can segfault (R5/R6, r16); global-lock around both",
        false="reset runs unlocked: it can also interleave with compiles (R5/R6, r16)",
    ),
)

_BY_KEY = {fact.key: fact for fact in PROBES}


def fact(key: str) -> Fact:
    return _BY_KEY[key]


def script(name: str) -> Script:
    return next(s for s in SCRIPTS if s.name == name)


def run_script(
    script: Script, *, timeout_s: float = DEFAULT_TIMEOUT_S, python: str = sys.executable
) -> tuple[dict[str, Any], float]:
    """Run one probe in a subprocess; its facts and duration, or ProbeFailed with the reason."""
    env = dict(os.environ)
    # The stash probe imports harness.runtime.fixes: the checkout's packages, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [python, "-c", script.code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"timed out after {timeout_s:g} s") from None
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise ProbeFailed(_exit_reason(proc.returncode, proc.stderr))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise ProbeFailed("exited 0 without a result line")
    try:
        facts = json.loads(lines[-1][len(MARKER) :])
    except json.JSONDecodeError as e:
        raise ProbeFailed(f"unreadable result line ({e})") from None
    if not isinstance(facts, dict):
        raise ProbeFailed("result line is not a JSON object")
    return facts, elapsed


def _exit_reason(rc: int, stderr: str) -> str:
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exit {rc}"
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    return f"{how}: {last[:200]}" if last else how


def run_probes(
    scripts: Iterable[Script] | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S, workers: int | None = None
) -> dict[str, ProbeResult]:
    """Every script's facts by key, in PROBES order (then any extra keys); probes run in parallel."""
    scripts = tuple(SCRIPTS if scripts is None else scripts)
    workers = workers or max(1, min(len(scripts), os.cpu_count() or 1, 4))
    results: dict[str, ProbeResult] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor-probe") as pool:
        futures = {pool.submit(run_script, s, timeout_s=timeout_s): s for s in scripts}
        for future, script in futures.items():
            try:
                facts, elapsed = future.result()
            except ProbeFailed as e:
                for key in script.facts:
                    results[key] = ProbeResult(key, script.name, error=str(e))
                continue
            errors = facts.get(ERRORS) if isinstance(facts.get(ERRORS), dict) else {}
            for key in script.facts:
                if key in errors:
                    results[key] = ProbeResult(key, script.name, error=str(errors[key]))
                elif key in facts:
                    results[key] = ProbeResult(key, script.name, value=facts[key], duration_s=round(elapsed, 2))
                else:
                    results[key] = ProbeResult(key, script.name, error="the probe did not report it")
    order = {f.key: i for i, f in enumerate(PROBES)}
    return dict(sorted(results.items(), key=lambda kv: order.get(kv[0], len(order))))
