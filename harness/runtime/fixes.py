"""Registry of named fix strategies for multi-threaded torch.compile, toggled by name.

Each fix is a small object (like Hypothesis' ShrinkPass) whose docstring says what it does, which
failure modes it targets (catalogue ids F1..F14, R1..R9, G1, G2, rNN: docs/glossary.md), and the
upstream issue/PR. A `FixSet` holds the active ones and counts how often each acted.

Hooks a fix may implement:
- `thread_start(role) -> bool`: per-thread initialisation, called by every worker thread at the
  top of its body (TLS seeding; per-thread Dynamo config, because torch 2.13 keeps config
  overrides in a ContextVar that a new thread does not inherit: F14).
- `on_device(device) -> bool`: called by a pipeline thread right after it binds its device.
- `enter() -> object | None` / `exit(token)`: wrapped around every compiled call and backward
  by `FixSet.around_call()`.
- `isolate(fn) -> fn`: give `fn` its own Dynamo cache (graph isolation).
Policy fixes have no hook: the pipeline reads `fs.active(name)` and records actions with
`fs.note(name)`.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import threading
import types
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from harness.runtime import thread_exit
from harness.runtime.errors import ConfigError

# One process-wide lock for the global-lock fix: reentrant because a compiled forward may run a
# backward (or another compiled call) on the same thread while it is held.
GLOBAL_LOCK = threading.RLock()
TLS_KEYS = ("tree_manager_containers", "tree_manager_locks")
_isolate_ids = itertools.count(1)


class Fix:
    """Base class: a named strategy; hooks default to doing nothing."""

    name = ""
    targets: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()
    early = False
    keyed = False
    """Whether `enter` takes the call's key (FixSet.around_call(key))."""
    unsound_with_cuda_graphs = ""
    """Why the fix does not hold where compiled calls record CUDA graphs ('' = it does):
    check_cuda_graphs() refuses the pair."""
    requires: tuple[str, ...] = ()
    """Fixes it is unsafe without: a FixSet naming it without them is a ConfigError."""

    def process_start(self) -> bool:
        """Once, in the thread that outlives the workers (the main thread), before they start."""
        return False

    def thread_start(self, role: str) -> bool:
        return False

    def on_device(self, device: Any) -> bool:
        return False

    def enter(self) -> Any:
        return None

    def exit(self, token: Any) -> None:
        return None

    def summary(self) -> str:
        return (self.__doc__ or "").strip().splitlines()[0]


class GlobalLock(Fix):
    """One process-wide RLock around every compiled call and backward.

    Serialises compile, cudagraph record/replay and lazy backward compile (F1c, F1d, F7, F8, F10;
    F2/F3 only when every tracer in the process also runs under the lock). Removes concurrency:
    the control arm. Upstream PR #184357 does the narrow version (graph_capture_lock), PR #184432.
    H200 / torch 2.11 runs (repro/README.md): holds for r05 (F1d), not for r04 (F1c: two threads
    still share one recorded graph, serialized or not). A thread started inside a locked call (a
    pool that compiles for it: pytorch#168042's backend runs compile_fx in 50 workers) takes that
    call's own lock instead (LockScope), so the holder never waits on helpers that wait on it.
    """

    name = "global-lock"
    targets = ("F1c", "F1d", "F2", "F3", "F7", "F8", "F10")
    upstream = ("#184357", "#184432")

    def enter(self) -> Any:
        if getattr(_held, "depth", 0):
            _held.depth += 1  # nested on this thread: already ordered
            return None
        # A thread started inside a locked call takes that call's own lock, not the global one: the
        # holder may wait on it (a compile's pool), so it must not wait on the holder; helpers still exclude each other.
        _patch_once(threading.Thread, "start", _scoped_start, GlobalLock.name)
        took = _acquire_scope(_birth_scope())
        _held.depth, _held.scope = 1, LockScope(threading.Lock(), parent=took)
        return True

    def exit(self, token: Any) -> None:
        _held.depth -= 1
        if _held.depth:
            return
        scope, _held.scope = _held.scope, None
        with scope.lock:  # a helper inside a guarded section finishes it first
            scope.open = False
        scope.parent.lock.release()


class LockScope:
    """A global-lock holder's outermost call, as a lock of its own: the threads it starts inside the
    call (and theirs) take `lock` instead of the one the holder took while the call is open.

    The holder may wait on such helpers (a ThreadPoolExecutor created for a compile); were they to
    take the global lock, holder and helpers would wait on each other for ever. Helpers therefore
    run one at a time beside their holder, and every other thread still waits for the holder; once
    the call ends a helper takes its holder's lock again (the scope's parent)."""

    __slots__ = ("lock", "open", "parent")

    def __init__(self, lock: Any, parent: LockScope | None) -> None:
        self.lock = lock
        self.open = True
        self.parent = parent


_ROOT_SCOPE = LockScope(GLOBAL_LOCK, parent=None)
_held = threading.local()
"""Per thread: `depth` of its guarded calls, `scope` (the LockScope its outermost call opened)."""
_SCOPE_ATTR = "_harness_lock_scope"


def _birth_scope() -> LockScope:
    return getattr(threading.current_thread(), _SCOPE_ATTR, None) or _ROOT_SCOPE


def _acquire_scope(scope: LockScope) -> LockScope:
    """Take the lock of the nearest open scope from `scope` up; the root (the global lock) never closes."""
    while True:
        while not scope.open:
            scope = scope.parent  # type: ignore[assignment]
        scope.lock.acquire()
        if scope.open:
            return scope
        scope.lock.release()  # closed while this thread waited: its holder's lock is next


def _scoped_start(start: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    def start_in_scope(self: threading.Thread) -> None:
        # A thread started inside a locked call helps that call; one started by a helper, its holder.
        inside = getattr(_held, "depth", 0)
        setattr(self, _SCOPE_ATTR, _held.scope if inside else getattr(threading.current_thread(), _SCOPE_ATTR, None))
        start(self)

    return start_in_scope


class ReadersWriterLock:
    """Shared or exclusive; a waiting writer stops new readers (steady calls never starve a compile)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writers_waiting += 1
                while self._writer or self._readers:
                    self._cond.wait()
                self._writers_waiting -= 1
                self._writer = True
            else:
                while self._writer or self._writers_waiting:
                    self._cond.wait()
                self._readers += 1

    def release(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


PHASE_LOCK = ReadersWriterLock()
PHASE_WARM_CALLS = 3
"""Calls of one callable and input signature that run exclusive: the first compiles (Dynamo,
AOTAutograd's lazy backward, Inductor), and with CUDA-graph trees the first warms up and the
second records; from the third on it replays."""
_phase_local = threading.local()


def _graphs_compiled() -> int:
    """Dynamo's process-wide count of graphs compiled (0 before Dynamo is loaded)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    return 0 if dynamo_utils is None else dynamo_utils.counters["stats"]["unique_graphs"]


class PhaseLock(Fix):
    """Exclusive while a call may compile, shared once it has run: steady-state compiled calls
    run concurrently; traces, compiles, CUDA-graph warm-up and recording run alone.

    The phase-scoped form of global-lock. A call's key is its callable and input signature
    (shapes, dtypes); its first PHASE_WARM_CALLS calls take the lock exclusive, later ones
    shared, so an eager forward never meets another thread's trace (F2, F3, R4, r19), first
    compiles and the lazy backward compile never overlap (F7, F8, F10, G2), and no steady call
    waits for another. A compile Dynamo starts during a shared call (a guard that failed on a
    known signature) is counted in `stats()` and sends that key back to exclusive. Upstream
    PR #184357 serialises CUDA-graph capture the same way (graph_capture_lock).

    Not for runs that record CUDA graphs (reduce-overhead): replays of cudagraph-trees share
    process-wide state (output refcounts, the tree's current node), and shared steady calls failed
    5 of 5 stressed launch-bound trials on torch 2.11 (F1c). Keep global-lock there.
    """

    name = "phase-lock"
    unsound_with_cuda_graphs = "shared steady replays failed 5 of 5 stressed launch-bound trials on torch 2.11 (F1c)"
    targets = ("F2", "F3", "F7", "F8", "F10")
    upstream = ("#184357",)
    keyed = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Any, int] = defaultdict(int)
        self._stats = {"exclusive": 0, "shared": 0, "compiles_while_shared": 0}

    def enter(self, key: Any = None) -> Any:
        if getattr(_phase_local, "depth", 0):
            # Nested in a call this thread already holds the lock for (a compiled forward that
            # runs a backward): already ordered; taking it again could wait on itself.
            _phase_local.depth += 1
            return None
        with self._lock:
            exclusive = key is None or self._calls[key] < PHASE_WARM_CALLS
            self._stats["exclusive" if exclusive else "shared"] += 1
        PHASE_LOCK.acquire(exclusive)
        _phase_local.depth = 1
        return exclusive, key, _graphs_compiled()

    def exit(self, token: Any) -> None:
        _phase_local.depth -= 1
        if token is None:
            return
        exclusive, key, graphs = token
        with self._lock:
            if exclusive:
                self._calls[key] += 1
            elif _graphs_compiled() != graphs:
                self._stats["compiles_while_shared"] += 1
                self._calls[key] = 0
        PHASE_LOCK.release(exclusive)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)


class Policy(Fix):
    """A policy the pipeline reads through FixSet.active(name); no hook of its own."""


class SequentialStartup(Policy):
    """Policy: compile and run the first training step of each model one thread at a time.

    Compile serially, then go concurrent: each model's first compile and step (forward and lazy
    backward) finish before the next thread starts its own. Avoids concurrent first compiles,
    duplicate compiles and the lazy backward compile on the autograd thread (F7, F8, F10, R7). Not
    enough for F1c/F1d (re-records later). Issue #123177.
    """

    name = "sequential-startup"
    targets = ("F7", "F8", "F10")
    upstream = ("#123177", "#118260")


class ThreadLocalWarmup(Policy):
    """Policy: each thread warms up (compiles/records) its own model on itself.

    Records graphs in the thread's own tree manager; helps F1/F1c only with
    local-tls-init or cstash-tls-init and only if the graph is not shared with another thread.
    Issue #123177 (flexivtrainer-style per-thread warm-up).
    """

    name = "thread-local-warmup"
    targets = ("F1", "F1c")
    upstream = ("#123177",)


class PersistentBuffers(Policy):
    """Policy: pad every batch to one fixed length (collate pad_to) so shapes never change.

    Fewer recompiles and no cudagraph re-records on new shapes, hence less recompile-limit
    pressure across threads sharing a code object (F10, F1c amplifier, F5). Issue #118260.
    """

    name = "persistent-buffers"
    targets = ("F10", "F5", "F1c")
    upstream = ("#118260",)


class TargetHookTaps(Policy):
    """Policy: the target threads tap hidden states with per-thread layer hooks
    (TargetModel.hidden_hooked) instead of transformers' output_hidden_states capture.

    That capture keeps its collector in a variable that is process-global while any thread is
    compiling (transformers#44614, repro r19); torch.compiler.is_compiling() is process-wide during
    any trace (R8), so a drafter compile is enough for two eager target threads to collide:
    `IndexError: tuple index out of range` in `_tap`, or silently wrong context. Found in the
    trainer on CPU with 2 target + 3 drafter threads (results/cpu-gpu-strategies).
    """

    name = "target-hook-taps"
    targets = ("r19", "R8")
    upstream = ("transformers#44614",)


class EagerTargetUnlocked(Policy):
    """Policy: an uncompiled target's forward runs outside the call-level fixes (no lock).

    `global-lock` wraps the target's eager forward as well as the drafter's compiled step, so a
    target forward and a drafter step never overlap: in the H200 launch-bound benches (torch 2.11,
    CUDA graphs, global-lock) the target threads were busy 88-100% of the run, lock waits
    included, and the drafters 45-60%. The lock covers that eager forward only for r19
    (transformers' hidden-state capture under another thread's compile, transformers#44614), which target-hook-taps
    removes, so it is only allowed beside target-hook-taps. It fixes nothing: it is a cost
    candidate, clean only once a stressed cell says so.
    """

    name = "eager-target-unlocked"
    requires = ("target-hook-taps",)
    upstream = ("transformers#44614",)


class StreamSync(Policy):
    """Policy: a target thread waits for its forward on its own current stream, not the device.

    The target loop synchronizes before handing the hidden states over; device-wide, that fails
    with `operation not permitted when stream is capturing` whenever a drafter thread is recording
    a cudagraph on the same device, whatever the capture's mode (F1d's message; NVIDIA/
    TensorRT#2888). A global lock does not cover it: the lock is around compiled calls and the
    synchronize comes after the target's forward leaves it (H200, launch-bound,
    global-lock+cstash-tls-init+cublas-handle-init+stash-incref: 1/29 stressed trials in
    results/gpu-campaign, torch 2.11, 2026-12-01). Repro r23. cudagraph trees capture on a pool
    stream ("thread_local" mode, PR #107407), never the thread's current one, so the stream wait
    is legal beside a capture.
    """

    name = "stream-sync"
    targets = ("F1d",)
    upstream = ("#107407", "NVIDIA/TensorRT#2888")


def _cudagraph_trees() -> Any:
    # Importable on CPU builds too; the import runs the TLS init for the importing thread only,
    # which is the root of F1.
    import torch._inductor.cudagraph_trees as cgt

    return cgt


def _seed_local(cgt: Any) -> bool:
    if all(hasattr(cgt.local, key) for key in TLS_KEYS):
        return False

    # Same two attributes the module body sets in the importing thread (2.11 lines 309-310).
    cgt.local.tree_manager_containers = {}
    cgt.local.tree_manager_locks = defaultdict(threading.Lock)
    return True


class LocalTlsInit(Fix):
    """Seed cudagraph_trees.local (tree_manager_containers/locks) in the thread if missing.

    The common partial workaround: a fresh thread gets its own tree manager, so a reduce-overhead
    forward no longer asserts at `torch._C._is_key_in_tls` (F1). Not enough for backward on the
    autograd device thread (it reads the C stash). Issue #123177, PR #184357.
    """

    name = "local-tls-init"
    targets = ("F1",)
    upstream = ("#123177", "#184357")

    def thread_start(self, role: str) -> bool:
        return _seed_local(_cudagraph_trees())


class CstashTlsInit(Fix):
    """local-tls-init plus `torch._C._stash_obj_in_tls` for both keys (if missing).

    The thread then looks like the importing one: the autograd engine copies the C stash into its
    worker threads, so the backward of this thread's cudagraphed graph finds this thread's manager
    (F1 via backward) and reset_cudagraph_trees() on this thread really resets it (F1b). The stash is dropped after the
    thread's join() returns, so interpreter exit waits for such threads as await-thread-exit does
    (r26). Issues #123177, #126934, PR #136735, PR #184357.
    """

    name = "cstash-tls-init"
    targets = ("F1", "F1b")
    upstream = ("#123177", "#126934", "#136735", "#184357")

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        cgt = _cudagraph_trees()
        acted = _seed_local(cgt)
        for key in TLS_KEYS:
            if not torch._C._is_key_in_tls(key):
                torch._C._stash_obj_in_tls(key, getattr(cgt.local, key))
                acted = True
        # The stash (this fix's, or cudagraph_trees' module body's when this thread imported it)
        # is dropped after join() returns; exit waits for that (r26).
        thread_exit.watch_current()
        return acted


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


class CublasHandleInit(Fix):
    """Create the thread's cuBLAS handle on its device before its first compiled call.

    PyTorch keeps one cuBLAS handle per (thread, device), made by the thread's first matmul. If
    that matmul is inside a CUDA graph capture (a thread whose first compiled call records
    rather than warms up), `cublasCreate` fails there: "CUBLAS_STATUS_NOT_INITIALIZED when calling
    `cublasCreate(handle)`" at capture_end. H200, torch 2.11: r04 under global-lock 4/4 and the
    trainer under global-lock + cstash-tls-init + persistent-buffers 1/1 (results/gpu-diag,
    docs/log/2026-11-29-dflash-trainer-on-h200.md), the lock ruling out a second thread's
    interleaving. Catalogued as G1 (first seen on the GPU trainer). PyTorch's CUDA graphs notes
    ask for warm-up iterations before capture for the same reason
    (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs). One of the five fixes of the
    configuration REPORT.md recommends on one H200.
    """

    name = "cublas-handle-init"
    targets = ("G1",)
    upstream = ("https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",)

    def on_device(self, device: Any) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        if getattr(device, "type", None) != "cuda":
            return False
        with torch.cuda.device(device):
            torch.cuda.current_blas_handle()
        return True


CUDAGRAPH_LOCK = threading.RLock()


class CudagraphLock(Fix):
    """One process-wide RLock around `CUDAGraphTreeManager.run`: record, warm-up and replay of
    every cudagraph tree, the device thread's backward included, one at a time.

    The narrow form of PR #184357's `graph_capture_lock` ("serializing graph capture and
    private-pool warmup paths"), which torch 2.11 lacks. On the H200 campaign
    (docs/log/2026-11-29-h200-campaign-first-115-trials.md) the C-stash init got the trainer past
    F1, then concurrent recordings collided: `beginAllocateToPool: already recording to mempool_id`
    (F1c) and one thread's `synchronize` inside another's capture (`operation not permitted when
    stream is capturing`, F1d's message). Unlike global-lock it leaves Dynamo, the eager parts of a
    step and the optimizer concurrent; a replay holds it only while launching. Does not answer F1
    itself (pair with cstash-tls-init) nor outputs overwritten by another thread's later replay
    (F1c: pair with graph-isolation). Installed once per process by the first thread that starts.
    Part of the concurrent configuration REPORT.md measured clean on launch-bound (one H200).
    """

    name = "cudagraph-lock"
    targets = ("F1c", "F1d")
    upstream = ("#184357", "#184432")

    def thread_start(self, role: str) -> bool:
        return _patch_once(_cudagraph_trees().CUDAGraphTreeManager, "run", _locked, self.name)


_patches_lock = threading.Lock()


def _patch_once(owner: Any, attr: str, wrap: Callable[[Callable], Callable], fix: str) -> bool:
    """owner.attr = wrap(owner.attr), once per process: every thread's thread_start calls it, the
    first one patches (True), the others find the mark of `fix` and leave it (False)."""
    with _patches_lock:
        current = getattr(owner, attr)
        if getattr(current, "_dflash_patched_by", None) == fix:
            return False
        patched = wrap(current)
        patched._dflash_patched_by = fix  # type: ignore[attr-defined]
        patched.__wrapped__ = current  # type: ignore[attr-defined]
        setattr(owner, attr, patched)
        return True


def _locked(run: Callable) -> Callable:
    def locked_run(self, *args: Any, **kwargs: Any) -> Any:
        with CUDAGRAPH_LOCK:
            return run(self, *args, **kwargs)

    locked_run.__doc__, locked_run.__name__, locked_run.__qualname__ = run.__doc__, run.__name__, run.__qualname__
    return locked_run


class StashIncref(Fix):
    """Give every `torch._C._stash_obj_in_tls(key, obj)` a reference of its own to obj.

    The binding wraps the borrowed argument in a c10::SafePyObject, whose constructor "steals a
    reference", without an incref (torch/csrc/Module.cpp at pytorch commit 00029b2949c9; its release
    not established); the SafePyObject decrefs once when the thread's C++ TLS map dies (thread exit)
    or the key is stashed again. So when a thread that stashed exits, the object loses a reference
    it never got: cudagraph_trees' per-thread dicts, owned only by that thread's `local`, are freed
    twice (repro r22), and the heap corruption surfaces later as a native crash anywhere (families
    segv and segv-gc). The hypothesis behind the heap corruption of cstash-tls-init's cells: they
    stash in every pipeline thread, and the prefetch and target threads exit before the drafters
    finish (r22 confirmed the lost reference on the H200's 2.11, 20/20, 2026-12-01). The patch
    measures the binding once, on a private probe object: if it keeps a reference it did not take,
    every stash gets one first (Py_IncRef); where the binding increfs (2.13, measured) the binding
    stays as it is. Patched once per process, by the first thread that starts; FixSet runs it before
    the other fixes so that their imports of cudagraph_trees (whose module body stashes) go through
    it. PR #89169 (the stash), #126934 (stashed TLS "gc'd"), PR #180295.
    """

    name = "stash-incref"
    targets = ("segv", "segv-gc")
    upstream = ("#89169", "#126934", "#180295")
    early = True

    def thread_start(self, role: str) -> bool:
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        return _patch_once(torch._C, "_stash_obj_in_tls", _balanced_stash, self.name)


_STASH_PROBES: list[Any] = []
"""Objects stashed once to measure a binding (kept alive: a stealing binding drops a reference to
each when the probing thread exits, and the probe gives it one to drop)."""


def _stash_steals(stash: Callable[[str, Any], None]) -> bool:
    """Whether `stash` keeps a reference it did not take, measured on a fresh object no other thread
    can reach. Measuring each call on the object being stashed would race: another thread's stash
    or exit moves a shared object's count between the two readings (r22's compile-chaos runs on
    the H200 read "[-1, 0]" for that reason, 2026-12-01)."""
    probe = type("StashProbe", (), {})()
    _STASH_PROBES.append(probe)
    before = sys.getrefcount(probe)
    stash(f"dflash_stash_probe_{len(_STASH_PROBES)}", probe)
    steals = sys.getrefcount(probe) == before
    if steals:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(probe))
    return steals


def _balanced_stash(stash: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    if not _stash_steals(stash):
        # The binding takes its own reference (2.13): nothing to add. Still a wrapper, which carries
        # the patch's mark so that the probe runs once per process.
        def stash_as_is(key: str, obj: Any) -> None:
            stash(key, obj)

        return stash_as_is

    def balanced_stash(key: str, obj: Any) -> None:
        # The reference the binding keeps: taken before the call, so that nothing between the call
        # and an incref after it can see the count short.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        try:
            stash(key, obj)
        except BaseException:
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(obj))
            raise

    return balanced_stash


class AwaitThreadExit(Fix):
    """Make interpreter exit wait until every thread that started under it has left the OS.

    join() returns before a thread's C++ thread_local destructors run; torch's C stash
    (`_stash_obj_in_tls`: CUDAGraph Trees' per-thread dicts, cstash-tls-init) drops its objects
    there under the GIL, and a destructor that asks for the GIL after finalization has begun is
    ended inside a noexcept frame: SIGABRT at exit, `terminate called without an active exception`
    (race stash-exit-finalize, repro r26). An atexit hook (run before finalization) waits for those
    OS threads, 5 s at most (harness.runtime.thread_exit; Linux). PR #89169 (the stash); #38228 and #117762 (a thread taking the
    GIL during finalization aborts); CPython gh-87135 (3.14 blocks such a thread instead).
    """

    name = "await-thread-exit"
    targets = ("stash-exit-finalize",)
    upstream = ("#89169", "#38228", "#117762", "cpython#87135")

    def thread_start(self, role: str) -> bool:
        thread_exit.watch_current()
        return True


class PinFakeCudaGuard(Fix):
    """Install the no-GPU CUDA device guard once from the main thread, before the workers start.

    On a CUDA build of torch 2.11 on a machine without a GPU, every FakeTensorMode entry (every
    compile) calls torch._C._ensureCUDADeviceGuardSet, which puts a guard owned by the calling
    thread's C++ thread_local into the process-wide registry; once that thread exits, the next
    entry in any thread calls through the freed guard: SIGSEGV (race fake-guard-exit, repro r29).
    Called from the main thread, the registry holds a guard that lives as long as the process, and
    later entries find a device count and leave it alone. A no-op on a CPU-only build, with a GPU,
    and outside the main thread. PR #163016 (the fake guard for FakeTensorMode on CUDA-less
    machines, issue #122109) put it in a thread_local.
    """

    name = "pin-fake-cuda-guard"
    targets = ("fake-guard-exit",)
    upstream = ("#163016", "#122109")

    def process_start(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # a worker's guard is what dangles: pinning it there would be the bug
        # the harness reads this registry without torch: a fix imports it when it acts
        import torch

        ensure = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)
        if ensure is None or torch.version.cuda is None:
            return False
        ensure()
        return True


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


# ------------------------------------------------------------------ races from public reports
# Fixes for races catalogued from public reports (harness/diagnosis/races.toml `reports`);
# dict-mutation (pytorch#196208, repro r27) needs none of its own: global-lock holds there.

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
        recorded = _patch_once(decorators, "_set_stance", _recording_stance, self.name)
        return _patch_once(eval_frame, "_is_skip_guard_eval_unsafe_stance", _own_stance, self.name) or recorded


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
    if type(a) in (torch.Tensor, torch.nn.Parameter):
        shape = tuple(a.shape)
        return (shape, a.dtype, a.device.type) if all(type(d) is int for d in shape) else _OPAQUE
    return type(a).__name__  # a tensor subclass or another object: its attributes may run user code


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
            raise ConfigError("fixes=recommended is resolved by the trainer (harness.runtime.recommend.resolve_names)")
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
