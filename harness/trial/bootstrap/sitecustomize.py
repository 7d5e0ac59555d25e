"""Child-process bootstrap: on PYTHONPATH first (harness.trial.runner), so Python runs it at start-up.

Always: faulthandler for all threads on fatal signals, and SIGUSR1 dumps every thread's stack
(the hang fallback when py-spy cannot attach). If HARNESS_THREAD_ERRORS names a file, every
uncaught exception of a thread is appended to it (one JSON line) from the thread's own
`_invoke_excepthook`, below whatever `threading.excepthook` the program installs (which still runs):
Python's default prints and carries on, and most threaded programs then exit 0. The main thread's
uncaught exception is appended as interpreter exit begins (sys.last_value, whatever sys.excepthook
printed), with the non-daemon threads the exit is about to wait for. Every process of the run
writes there; a child's records carry its pid and role. So is the
exception of a concurrent.futures Future that the program never read (`result()` or
`exception()`): a pool's task that failed prints nothing at all, and the program exits 0. Each
record says who owns it (`owner`: the program, or a library whose own thread or Future it was,
decided by the frames that created the thread or Future, `created_at`): a library's is noise.
Only if HARNESS_PLAN is set: load the plan, install the scheduler (switch interval, start barrier,
lazy torch point wrappers, harness.runtime.failpoints handler) and print one line
`HARNESS_PLAN seed=<seed> profile=<name>` to stderr.
Only if HARNESS_EXPOSURE is set (the runner sets it unless the trial turns exposure off): install
the exposure probes (harness.faults.exposure), which count the races' windows into that file;
after the plan, so that a probe's region opens inside the plan's delays at the same point.
Only if HARNESS_FIXES is set (`harness stress --fix`): apply those registry fixes to the unmodified
program (harness.inject), print `HARNESS_FIXES <names>` at start and how often each acted at exit.
The plan, the probes and the fixes act on the first Python process of the command: each variable is
taken out of the environment once read, so the processes it starts run unplanned and unpatched,
unless HARNESS_CHILDREN=1 (`stress --children`) keeps the plan and the fixes for them; torch's
compile workers and multiprocessing's resource tracker never get them.
Without these variables nothing of the harness is imported and nothing is patched, so the cost is
two faulthandler calls, a thread hook, the import of concurrent.futures (stdlib), four of its
Future methods and Thread.__init__ wrapped.
"""

import atexit
import faulthandler
import functools
import importlib.util
import json
import os
import signal
import sys
import sysconfig
import threading
import traceback
from concurrent.futures import _base
from types import ModuleType


def _enable_faulthandler() -> None:
    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def _fail(message: str, variable: str = "HARNESS_PLAN") -> None:
    # sys.exit inside sitecustomize becomes "Fatal Python error: init_import_site" with rc 1;
    # exit 2 is the contract's "bad input" (harness.trial.runner classifies it HARNESS_ERROR).
    sys.stderr.write(f"{variable} error: {message}\n")
    sys.stderr.flush()
    os._exit(2)


def _install_plan(scheduler: ModuleType, value: str) -> None:
    try:
        plan = scheduler.load_plan(value)
    except scheduler.InvalidPlan as e:
        _fail(str(e))
    scheduler.install(plan, log_path=os.environ.get(scheduler.ENV_PLAN_LOG) or None)
    sys.stderr.write(f"HARNESS_PLAN seed={plan.seed} profile={plan.profile}\n")
    sys.stderr.flush()


# Where the program's own code ends: the interpreter's standard library and installed packages
# (torch, triton, ...) are the library side; the harness's own files count as library too.
_LIBRARY_DIRS = tuple(
    {os.path.realpath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])}
)
_HARNESS_DIR = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")) + os.sep
_SITE_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


@functools.lru_cache(maxsize=4096)
def _is_stdlib(filename: str) -> bool:
    path = os.path.realpath(filename)
    return path.startswith(_LIBRARY_DIRS) and not any(m in path for m in _SITE_MARKERS)


def _is_library(filename: str) -> bool:
    """An installed package's file, or the harness's own (the trial's fixes and probes); never a
    file of the package the program runs from (`python -m mypkg.serve` with mypkg installed)."""
    root = _program_root()
    return _library_path(filename) and not (root and os.path.realpath(filename).startswith(root))


@functools.lru_cache(maxsize=4096)
def _library_path(filename: str) -> bool:
    path = os.path.realpath(filename)
    return any(m in path for m in _SITE_MARKERS) or path.startswith(_HARNESS_DIR) or filename.startswith("<frozen")


def _program_root() -> str:
    """The folder of the top-level package __main__ belongs to ("" for a plain script, whose own
    folder is no library anyway, or before __main__ has a file)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return _package_root(main_file) if main_file else ""


@functools.lru_cache(maxsize=8)
def _package_root(main_file: str) -> str:
    folder = os.path.dirname(os.path.realpath(main_file))
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        return ""
    while os.path.isfile(os.path.join(os.path.dirname(folder), "__init__.py")):
        folder = os.path.dirname(folder)
    return folder + os.sep


def _creator(depth: int = 2) -> tuple[str, list[str]]:
    """Who made the current Future or thread: the innermost frame outside the standard library
    (concurrent.futures, threading, asyncio and the like only pass the call on). 'library' when
    that frame is an installed package's (Inductor's compile pool, an autotuner's), else
    'program'; with the first frames from there outwards, as `file:line in function`."""
    frame, frames, owner = sys._getframe(depth), [], None
    while frame is not None and len(frames) < 6:
        code = frame.f_code
        if owner is None and not _is_stdlib(code.co_filename):
            owner = "library" if _is_library(code.co_filename) else "program"
        if owner is not None:
            frames.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return owner or "program", frames


def _thread_owner(thread) -> str:
    """A thread is the program's when the program created it or its body is the program's code."""
    created = getattr(thread, "_harness_owner", "program")
    target = getattr(thread, "_target", None)
    code = getattr(target, "__code__", None) or getattr(type(thread).run, "__code__", None)
    body = "library" if code is None or _is_stdlib(code.co_filename) or _is_library(code.co_filename) else "program"
    return "program" if "program" in (created, body) else "library"


def _remembering_creator(init, then=None):
    """A class's __init__ that also stamps each instance with who created it (`_creator`), then
    calls `then(instance)`."""

    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            self._harness_owner, self._harness_created_at = _creator()
            if then is not None:
                then(self)
        except Exception:  # ownership is evidence, never a second failure
            pass

    return wrapped


def _exception_record(exc_type, exc, tb, *, thread: str | None, owner: str, created_at: list[str]) -> dict:
    """One line of the thread-errors file: the exception as Python's thread hook prints it, and in
    a process the program started (every process of the run writes to the one file), which one."""
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    record = {
        "thread": thread,
        "type": exc_type.__qualname__,
        "message": str(exc)[:2000],
        "traceback": text[-20000:],
        "owner": owner,
        "created_at": created_at,
    }
    if os.getpid() != _ROOT_PID:
        record["pid"], record["process"] = os.getpid(), _process_role()
    return record


def _process_role() -> str:
    """What a child process of the run is: multiprocessing's name for it, else its command line."""
    mp = sys.modules.get("multiprocessing")
    name = mp.current_process().name if mp is not None else "MainProcess"
    if name != "MainProcess":
        return name
    argv = [a for a in getattr(sys, "orig_argv", sys.argv)[1:] if a]
    return " ".join(os.path.basename(a) if os.sep in a else a for a in argv)[:120] or "python"


_HELPERS = ("torch._inductor", "torch/_inductor", "multiprocessing.resource_tracker")


def _helper_process() -> bool:
    """A helper process of torch's or the standard library's own (Inductor's compile workers,
    multiprocessing's resource tracker): it runs none of the program's code, so it is never planned,
    patched or fixed."""
    return any(h in a for a in getattr(sys, "orig_argv", ()) for h in _HELPERS)


# The run's first process: every process after it inherits the variable and is a child.
_ROOT_PID = int(os.environ.setdefault("HARNESS_ROOT_PID", str(os.getpid())))
_CHILDREN = os.environ.get("HARNESS_CHILDREN") == "1" and not _helper_process()
"""`stress --children`: the plan and the fixes reach the processes the program starts too."""


def _take(variable: str) -> str | None:
    """A harness variable for this process; out of the environment for the processes it starts,
    unless the run asked for its children too (and this is no process of torch's own)."""
    return os.environ.get(variable) if _CHILDREN else os.environ.pop(variable, None)


_HOOK_LOCK = threading.RLock()
"""One thread's uncaught traceback is printed whole: the default hook writes it line by line, and
threads that fail together (one race, every worker) interleave them past telling which frame is
whose."""

_EXIT_FRAMES = 3


def _append(path: str, record: dict) -> None:
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except Exception:  # the record is evidence, never a second failure
        pass


def _thread_death(path: str, thread, exc_type, exc, tb) -> None:
    # SystemExit in a thread is a quiet exit (the default hook ignores it too).
    if exc_type is None or exc_type is SystemExit:
        return
    try:
        record = _exception_record(
            exc_type,
            exc,
            tb,
            thread=getattr(thread, "name", None),
            owner=_thread_owner(thread) if thread is not None else "program",
            created_at=getattr(thread, "_harness_created_at", []),
        )
    except Exception:
        return
    _append(path, record)


def _recorded_invoke(path: str, invoke):
    """A thread's own `_invoke_excepthook` that records the death first: it runs below whatever
    `threading.excepthook` the program installs (a service's hook that only logs to a file would
    otherwise hide every death), and the program's hook still runs as it would have."""

    def invoke_excepthook(thread) -> None:
        _thread_death(path, thread, *sys.exc_info())
        invoke(thread)

    return invoke_excepthook


def _record_death_below_hooks(path: str):
    """What a new thread gets after its creator is stamped: its own `_invoke_excepthook` records
    its death below any hook (`_recorded_invoke`)."""

    def then(thread) -> None:
        invoke = getattr(thread, "_invoke_excepthook", None)
        if invoke is not None:
            thread._invoke_excepthook = _recorded_invoke(path, invoke)

    return then


def _where(frame) -> list[str]:
    frames = []
    while frame is not None and len(frames) < _EXIT_FRAMES:
        frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return frames


def _exit_waits(main_ident: int) -> list[dict]:
    """The non-daemon threads interpreter exit is about to join, each with where it is now."""
    frames = sys._current_frames()
    return [
        {"thread": t.name, "at": _where(frames.get(t.ident))}
        for t in threading.enumerate()
        if t.ident != main_ident and not t.daemon and t.is_alive()
    ]


def _recording_shutdown(path: str, shutdown):
    """threading._shutdown, which interpreter exit calls before it joins the non-daemon threads,
    preceded by the record of the main thread's death: Python has printed it through sys.excepthook
    (which the program may have replaced) and kept it in sys.last_value; a thread the exit then
    waits for can keep the process alive past any deadline, so the record is written here, first."""

    def recording_shutdown(*args, **kwargs):
        exc = getattr(sys, "last_value", None)
        if isinstance(exc, BaseException) and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            try:
                main = threading.main_thread()
                record = _exception_record(
                    type(exc), exc, exc.__traceback__, thread=main.name, owner="program", created_at=[]
                )
                record["main"] = True
                record["exit_waits_for"] = _exit_waits(main.ident)
                _append(path, record)
            except Exception:  # the record is evidence, never a second failure
                pass
        return shutdown(*args, **kwargs)

    return recording_shutdown


def _record_thread_errors(path: str) -> None:
    previous = threading.excepthook

    def printing_hook(args) -> None:
        with _HOOK_LOCK:
            previous(args)

    threading.Thread.__init__ = _remembering_creator(threading.Thread.__init__, _record_death_below_hooks(path))
    threading.excepthook = printing_hook
    threading._shutdown = _recording_shutdown(path, threading._shutdown)
    _record_unread_futures(path)


class _AfterImport:
    """A meta-path finder that calls `callback(module)` once `name` is imported, and only then: the
    bootstrap must not import torch into a program that may never use it."""

    def __init__(self, name: str, callback) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_call(module):
            exec_module(module)
            try:
                callback(module)
            except Exception:  # a record is evidence, never a second failure
                pass

        spec.loader.exec_module = exec_then_call
        return spec


_CONFIG_SETS_CAP = 200


def _record_config_sets(path: str) -> None:
    """Each config value the program itself sets (`torch._dynamo.config.recompile_limit = 64`), with
    the thread that set it: on torch 2.12+ an override is thread-local (pytorch#186537), so a limit
    set in one thread and hit at its default in another is that race. torch's own `config.patch`
    calls are the library's and not recorded."""
    written = set()

    def patch(module) -> None:
        cls = module.ConfigModule
        setattr_ = cls.__setattr__

        def recording_setattr(self, name, value):
            setattr_(self, name, value)
            try:
                if name in self._config and _creator()[0] == "program" and len(written) < _CONFIG_SETS_CAP:
                    record = {
                        "config": f"{self.__name__}.{name}",
                        "value": repr(value)[:200],
                        "thread": threading.current_thread().name,
                    }
                    line = json.dumps(record)
                    if line not in written:
                        written.add(line)
                        _append_record(path, record)
            except Exception:  # a record is evidence, never a second failure
                pass

        cls.__setattr__ = recording_setattr

    sys.meta_path.insert(0, _AfterImport("torch.utils._config_module", patch))
    _after_import("torch._dynamo", lambda m: _record_resets(m, path))


_RESETS = ("reset", "reset_code_caches")


def _record_resets(dynamo, path: str) -> None:
    """Each thread that calls torch._dynamo.reset() (or reset_code_caches) while other threads of the
    program live, once: a native crash anywhere in such a run may be reset() freeing what a compiled
    call reads (R5, pytorch PRs #193697/#195355), and nothing in the crash itself says so."""
    seen = set()
    inside = threading.local()  # reset() calls reset_code_caches(): the outer call only

    def note(name: str) -> None:
        me = threading.current_thread()
        if (me.name, name) in seen or len(seen) >= _CONFIG_SETS_CAP:
            return
        beside = sum(1 for t in threading.enumerate() if t is not me and _thread_owner(t) == "program")
        if beside:
            seen.add((me.name, name))
            _append_record(path, {"call": f"torch._dynamo.{name}()", "thread": me.name, "beside": beside})

    def wrap(name: str, original):
        @functools.wraps(original)
        def recording(*args, **kwargs):
            if getattr(inside, "call", False):
                return original(*args, **kwargs)
            inside.call = True
            try:
                try:
                    note(name)
                except Exception:  # a record is evidence, never a second failure
                    pass
                return original(*args, **kwargs)
            finally:
                inside.call = False

        return recording

    for name in _RESETS:
        if callable(getattr(dynamo, name, None)):
            setattr(dynamo, name, wrap(name, getattr(dynamo, name)))


def _append_record(path: str, record: dict) -> None:
    """One JSON line, with the pid and role of a process the program started."""
    try:
        if os.getpid() != _ROOT_PID:
            record["pid"], record["process"] = os.getpid(), _process_role()
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except Exception:  # a record is evidence, never a second failure
        pass


def _count_program_threads(path: str) -> None:
    """How many threads and processes the program itself started, written at exit (`{"started": n,
    "names": [...], "processes": m}`): a failure in a run that started neither cannot be a race
    between its threads (a child's threads are its own, and its failure may reach the output only
    as a logged or re-raised exception)."""
    started: list[str] = []
    processes: list[str] = []
    thread_start = threading.Thread.start

    def start(self, *args, **kwargs):
        if _thread_owner(self) == "program" and len(started) < 10_000:
            started.append(self.name)
        return thread_start(self, *args, **kwargs)

    def report() -> None:
        try:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"started": len(started), "names": started[:20], "processes": len(processes)}, fh)
        except Exception:
            pass

    threading.Thread.start = start
    _after_import("subprocess", lambda m: _count_calls(m.Popen, "__init__", processes))
    _after_import("multiprocessing.process", lambda m: _count_calls(m.BaseProcess, "start", processes))
    atexit.register(report)


def _after_import(name: str, callback) -> None:
    """`callback(module)` now if `name` is imported already, else once it is."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _count_calls(cls, method: str, calls: list[str]) -> None:
    """cls.method counts the calls the program itself makes (not a library's: Inductor's workers)."""
    original = getattr(cls, method)

    def counted(self, *args, **kwargs):
        try:
            if _creator()[0] == "program" and len(calls) < 10_000:
                calls.append(cls.__name__)
        except Exception:  # a count is evidence, never a second failure
            pass
        return original(self, *args, **kwargs)

    setattr(cls, method, counted)


def _record_unread_futures(path: str) -> None:
    """A Future's exception that no one read by exit: one record per Future, with the thread that
    set it and who created the Future, written from an atexit hook, which runs after the pools'
    workers are joined (threading's own exit hooks come first). Nothing is printed: the program
    would not print it. A library's Future (Inductor's compile pool closing at exit fails its
    pending Futures with `SubprocPool closed`) is recorded as the library's, which the runner
    keeps as noise."""
    # Each record hangs off its Future and stays in `records` after the Future is gone: one a
    # program dropped unread is still reported at exit.
    records: list[dict] = []
    lock = threading.Lock()
    set_exception = _base.Future.set_exception

    def recording_set_exception(self, exc):
        try:
            record = _exception_record(
                type(exc),
                exc,
                exc.__traceback__,
                thread=f"{threading.current_thread().name} (a Future's exception, never read)",
                owner=getattr(self, "_harness_owner", "program"),
                created_at=getattr(self, "_harness_created_at", []),
            )
            record["read"] = False
            self._harness_exception_record = record
            with lock:
                records.append(record)
        except Exception:  # the record is evidence, never a second failure
            pass
        return set_exception(self, exc)

    _base.Future.__init__ = _remembering_creator(_base.Future.__init__)
    _base.Future.set_exception = recording_set_exception
    _base.Future.result = _marking_read(_base.Future.result)
    _base.Future.exception = _marking_read(_base.Future.exception)
    atexit.register(_write_unread, path, records, lock)


def _marking_read(method):
    """A Future method that marks the Future's exception record read, after the call: a reader that
    waited gets the exception set meanwhile."""

    def read(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            record = getattr(self, "_harness_exception_record", None)
            if record is not None:
                record["read"] = True

    read.__name__, read.__doc__ = method.__name__, method.__doc__
    return read


def _write_unread(path: str, records: list[dict], lock: threading.Lock) -> None:
    with lock:
        left = [{k: v for k, v in r.items() if k != "read"} for r in records if not r["read"]]
    if not left:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(record) + "\n" for record in left)
    except Exception:
        pass


def _chain_next_sitecustomize() -> None:
    """Python runs only the first sitecustomize on sys.path; ours shadows any later one (e.g. a
    distribution's), so run that one too, once, as it would have run without us."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        path = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    exec(compile(f.read(), path, "exec"), {"__name__": "sitecustomize", "__file__": path})
            except Exception as e:  # theirs failing must not stop the trial; say so
                sys.stderr.write(f"harness bootstrap: {path} failed: {type(e).__name__}: {e}\n")
            return


_enable_faulthandler()
if _helper_process() and os.getpid() != _ROOT_PID:
    for _variable in ("HARNESS_PLAN", "HARNESS_FIXES", "HARNESS_EXPOSURE"):
        os.environ.pop(_variable, None)
if os.environ.get("HARNESS_THREAD_ERRORS"):
    _record_thread_errors(os.environ["HARNESS_THREAD_ERRORS"])
if os.environ.get("HARNESS_CONFIG_SETS") and not _helper_process():
    # Kept in the environment: a process the program starts appends its own, with its pid.
    _record_config_sets(os.environ["HARNESS_CONFIG_SETS"])
if os.environ.get("HARNESS_THREADS"):
    # Taken out of the environment: a process the program starts would overwrite the count.
    _count_program_threads(os.environ.pop("HARNESS_THREADS"))
_chain_next_sitecustomize()
if os.environ.get("HARNESS_PLAN"):
    # Only under a plan: without one, nothing of the harness is imported.
    try:
        from harness.faults import scheduler
    except ImportError as e:  # PYTHONPATH lacks the repo root: say so instead of running unplanned
        _fail(f"cannot import harness.faults.scheduler: {e}")
    # Taken out of the environment, as the probes below: the plan is for the program's own process.
    # A process it starts inherits the variables with another cwd (torch 2.11's Inductor checks its
    # CPU vector ISA by running `python -c "import torch ..."` in its cache folder), and a plan it
    # cannot load there is exit 2: the ISA check failed and every flex-attention compile with it.
    _install_plan(scheduler, _take("HARNESS_PLAN"))
if os.environ.get("HARNESS_FIXES"):
    try:
        from harness import inject
        from harness.runtime.guard import GuardError
    except ImportError as e:
        _fail(f"cannot import harness.inject: {e}", "HARNESS_FIXES")
    try:
        _guard = inject.install(_take("HARNESS_FIXES"))
    except GuardError as e:
        _fail(str(e), "HARNESS_FIXES")
    sys.stderr.write(f"HARNESS_FIXES {','.join(_guard.names) or 'none'}\n")
    sys.stderr.flush()
    import atexit

    atexit.register(lambda: sys.stderr.write(f"HARNESS_FIXES acted: {_guard.describe()}\n"))
if os.environ.get("HARNESS_EXPOSURE"):
    try:
        from harness.faults import exposure
    except ImportError as e:
        _fail(f"cannot import harness.faults.exposure: {e}", "HARNESS_EXPOSURE")
    # Taken out of the environment: a process the workload starts (Inductor's compile workers)
    # would otherwise install its own probes and overwrite the trial's file with its zeros.
    exposure.install(os.environ.pop("HARNESS_EXPOSURE"))
