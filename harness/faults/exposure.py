"""Exposure probes: how often a race's window opened in one run, so that "0 failures in N trials"
can say whether the race was given a chance to happen.

A probe watches a precondition of one catalogued race (`exposure = "NAME"` in
harness/diagnosis/races.toml) that point hooks can see cheaply: regions entered and left at
harness.faults.points (torch) and harness.runtime.failpoints stage points, per thread (harness.faults.regions),
and events that find another thread inside a region. Each opening of a window is counted under
the probe's `window` key (the race id), with the time it first opened.

Installed by the trial bootstrap when HARNESS_EXPOSURE names a file (the runner sets it for every
trial unless the spec turns it off; off means nothing is installed). The child rewrites that
file (tmp + rename) when a window first opens, at each doubling of its count, and at exit, so a
trial that dies natively still reports that the window opened (its count then a lower bound).

Off the windows, a hook costs a dict lookup and a few dict reads per point hit (compiled calls,
backwards, the trainer's stage points). `python -m harness exposure-cost` on the H200 host's 16
CPU cores (torch 2.11.0+cu130, 2026-12-02; tiny-cpu, aot_eager, 480 steps, 4 rounds each way):
tokens/s on/off 1.079 (best rounds), 1.060 (medians), the rounds spreading 12% either way, so the
ratio cannot resolve a cost this small; 14,425 hook calls per round at 55-472 ns each come to
0.024% of a round's wall time.

Seen to open, one trial per cell under the race suite's plan: torch 2.13.0+cpu, the 2-core CPU
machine, 2026-12-02: F2 (r06 425 openings, r14 552), F3 (r07 2, r14 2), R4 (r15 4,699), R5 (r16
8), F10 (r11 12, r17 20, the tiny-cpu trainer 11), G2 and the first-step window (the trainer, 1
each); the suite's fixes kept each shut (nested-fx-fallback's 382 r06 openings all ran
eagerly). One H200, torch 2.11.0+cu130, 2026-12-02: F1 (r01 4, r02 1), F1c and capture (r04 and
r05, 1 each); none under r01's cstash-tls-init+global-lock, r02's cstash-tls-init, r05's
global-lock.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.faults import points
from harness.faults.regions import Regions

ENV_EXPOSURE = "HARNESS_EXPOSURE"
"""The file the child writes its counts to; unset: no probe is installed."""
FORMAT_VERSION = 1
FIRST_STEP = "drafter-first-step"
"""The trainer's own window: not a catalogued race, the precondition of its compile races."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    name: str
    """What races.toml's `exposure` names."""
    window: str
    """The key its count is recorded under: the race id (FIRST_STEP for the trainer's window)."""
    points: tuple[str, ...] = ()
    """Torch points it needs: measured only once every one is installed (its module loaded)."""
    stages: str | None = None
    """The trainer module whose harness.runtime.failpoints stage points it reads: measured once it is loaded."""
    cuda: bool = False
    """Only meaningful once CUDA is initialised (the F1 family)."""
    why: str


PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        Probe(
            name="fx-flag-overlap",
            window="F2",
            points=("fx.trace", "compiled.call"),
            why="a compiled call checks FX's process-global tracing flag while another thread "
            "is inside Tracer.trace (R1), or a trace starts while another's is live, so their "
            "save/restore of the flag can interleave and leave it stuck (R2); pytorch#126024. "
            "A check made where error_on_nested_fx_trace is off runs the call eagerly: counted "
            "apart as `eager`",
        ),
        Probe(
            name="fx-patcher-overlap",
            window="F3",
            points=("fx.trace",),
            why="a trace starts while another thread's trace is live: both install and restore "
            "the global CURRENT_PATCHER (pytorch#168042)",
        ),
        Probe(
            name="module-call-under-tracer",
            window="R4",
            points=("fx.trace", "fx.call_module"),
            why="a thread that is not tracing lands in Tracer.call_module while another thread "
            "traces with nn.Module.__call__ patched (PR #187589)",
        ),
        Probe(
            name="reset-vs-compiled-frame",
            window="R5",
            points=("dynamo.reset", "compiled.call", "dynamo.convert_frame"),
            why="torch._dynamo.reset() runs while another thread enters a compiled call or "
            "converts a frame (its cache entry inserted as reset clears them; PR #195355), or "
            "starts while another thread is converting one",
        ),
        Probe(
            name="concurrent-frame-conversion",
            window="F10",
            points=("dynamo.convert_frame",),
            why="a thread enters Dynamo's frame conversion while another is inside it: both "
            "missed the cache, so the second compiles a duplicate or counts toward the "
            "recompile limit (R7)",
        ),
        Probe(
            name="backward-compile-vs-trace",
            window="G2",
            points=("aot.backward_compile", "dynamo.convert_frame"),
            why="a backward's lazy compile step overlaps another thread's Dynamo frame "
            "conversion (pytorch#104971); on 2.13 every backward passes the step, compiling on "
            "the first, so on CPU this bounds the window from above",
        ),
        Probe(
            name="cudagraph-tls-unseeded",
            window="F1",
            points=("cudagraph.get_container",),
            cuda=True,
            why="a CUDAGraph-Trees manager looked up from a thread whose TLS holds no tree "
            "containers (pytorch#123177); counted once per thread",
        ),
        Probe(
            name="cudagraph-record-overlap",
            window="F1c",
            points=("cudagraph.record",),
            cuda=True,
            why="two threads inside cudagraph trees at once: one starts recording while another "
            "records, or enters a tree's run (warm-up, record or replay) while another is in one: "
            "one manager's state and pool, without a lock on 2.11 (PR #184357). Any two trees "
            "count, so per-thread trees are not told apart; a program whose trees are per-thread "
            "reads as exposed. cudagraph.run adds its openings where it resolves",
        ),
        Probe(
            name="compiled-call-during-record",
            window="capture",
            points=("cudagraph.record", "compiled.call"),
            cuda=True,
            why="a compiled call or a tree's run starts while another thread records a CUDA "
            "graph: its kernels meet the capture (pytorch#172390)",
        ),
        Probe(
            name="drafter-first-step",
            window=FIRST_STEP,
            stages="dflash.step",
            why="two drafter threads inside their first compiled step (drafter.before_forward "
            "to drafter.after_backward) at once, where their compiles meet",
        ),
    )
}

# Regions, named after the points that open them.
TRACE, CONVERT, RESET, BACKWARD, RECORD, RUN = (
    "fx.trace",
    "dynamo.convert_frame",
    "dynamo.reset",
    "aot.backward_compile",
    "cudagraph.record",
    "cudagraph.run",
)


class Exposure:
    """Counts window openings in this process; `hook` and `stage` are what the points call."""

    def __init__(
        self, path: str | None = None, *, clock: Callable[[], float] = time.monotonic, probes: dict[str, Probe] = PROBES
    ) -> None:
        self.path = path
        self.probes = probes
        self.regions = Regions()
        self.counts: dict[str, int] = {}
        self.eager: dict[str, int] = {}
        self.first_s: dict[str, float] = {}
        self._clock = clock
        self._t0 = clock()
        self._write_lock = threading.Lock()
        self._first_step_done: set[int] = set()
        self._tls_checked: set[int] = set()
        self._windows = {p.window for p in probes.values()}
        self._on: dict[tuple[str, str], Callable[[int], None]] = {
            (TRACE, "before"): self._trace_start,
            ("compiled.call", "before"): self._compiled_call,
            ("fx.call_module", "before"): self._module_call,
            (CONVERT, "before"): self._convert_start,
            (RESET, "before"): self._reset_start,
            (BACKWARD, "before"): self._backward_start,
            ("cudagraph.get_container", "before"): self._get_container,
            (RECORD, "before"): self._record_start,
            (RUN, "before"): self._run_start,
        }
        for region in (TRACE, CONVERT, RESET, BACKWARD, RECORD, RUN):
            self._on[(region, "after")] = self._on[(region, "raise")] = self._leaver(region)

    # --------------------------------------------------------------------------- entry points

    def hook(self, point: str, when: str) -> None:
        """harness.faults.points hook."""
        on = self._on.get((point, when))
        if on is not None:
            on(threading.get_ident())

    def stage(self, name: str) -> None:
        """harness.runtime.failpoints handler (stage points have no after side: a pair makes a region)."""
        if name == "drafter.before_forward":
            thread = threading.get_ident()
            if thread not in self._first_step_done and not self.regions.inside(FIRST_STEP, thread):
                if self.regions.others_inside(FIRST_STEP, thread):
                    self.opened(FIRST_STEP)
                self.regions.enter(FIRST_STEP, thread)
        elif name == "drafter.after_backward":
            thread = threading.get_ident()
            if self.regions.inside(FIRST_STEP, thread):
                self.regions.leave(FIRST_STEP, thread)
                self._first_step_done.add(thread)

    # --------------------------------------------------------------------------------- rules

    def _leaver(self, region: str) -> Callable[[int], None]:
        leave = self.regions.leave
        return lambda thread: leave(region, thread)

    def _trace_start(self, thread: int) -> None:
        if self.regions.others_inside(TRACE, thread):
            self.opened("F2")
            self.opened("F3")
        self.regions.enter(TRACE, thread)

    def _compiled_call(self, thread: int) -> None:
        regions = self.regions
        if regions.others_inside(TRACE, thread):
            self.opened("F2", eager=_nested_trace_runs_eagerly())
        if regions.others_inside(RESET, thread):
            self.opened("R5")
        if regions.others_inside(RECORD, thread):
            self.opened("capture")

    def _module_call(self, thread: int) -> None:
        if not self.regions.inside(TRACE, thread) and self.regions.others_inside(TRACE, thread):
            self.opened("R4")

    def _convert_start(self, thread: int) -> None:
        regions = self.regions
        if regions.others_inside(CONVERT, thread):
            self.opened("F10")
        if regions.others_inside(RESET, thread):
            self.opened("R5")
        if regions.others_inside(BACKWARD, thread):
            self.opened("G2")
        regions.enter(CONVERT, thread)

    def _reset_start(self, thread: int) -> None:
        if self.regions.others_inside(CONVERT, thread):
            self.opened("R5")
        self.regions.enter(RESET, thread)

    def _backward_start(self, thread: int) -> None:
        if self.regions.others_inside(CONVERT, thread):
            self.opened("G2")
        self.regions.enter(BACKWARD, thread)

    def _record_start(self, thread: int) -> None:
        if self.regions.others_inside(RECORD, thread):
            self.opened("F1c")
        self.regions.enter(RECORD, thread)

    def _run_start(self, thread: int) -> None:
        regions = self.regions
        if regions.others_inside(RUN, thread):
            self.opened("F1c")
        if regions.others_inside(RECORD, thread):
            self.opened("capture")
        regions.enter(RUN, thread)

    def _get_container(self, thread: int) -> None:
        if thread in self._tls_checked:
            return
        self._tls_checked.add(thread)
        if not _cudagraph_tls_seeded():
            self.opened("F1")

    # ------------------------------------------------------------------------------ counting

    def opened(self, window: str, *, eager: bool = False) -> None:
        """One opening of `window`; `eager`: the call took Dynamo's eager fallback instead."""
        if window not in self._windows:
            return
        n = self.counts.get(window, 0) + 1
        self.counts[window] = n
        if eager:
            self.eager[window] = self.eager.get(window, 0) + 1
        if n == 1:
            self.first_s.setdefault(window, round(self._clock() - self._t0, 6))
        if n & (n - 1) == 0:  # 1, 2, 4, ...: a crash loses at most half the count
            self.write(final=False)

    def measured(self) -> list[str]:
        """Windows whose probes are installed in this process (their modules were loaded)."""
        installed = points.installed()
        cuda = _cuda_initialised()
        out = []
        for p in self.probes.values():
            if not all(name in installed for name in p.points):
                continue
            if p.stages is not None and p.stages not in sys.modules:
                continue
            if p.cuda and not cuda:
                continue
            out.append(p.window)
        return sorted(set(out))

    def snapshot(self, *, final: bool) -> dict:
        # Copies first: other threads count while this one reads (iterating the live dict raised
        # "dictionary changed size during iteration" inside a program's threads); dict() of a dict
        # copies under the GIL in one step.
        counts, eager, first_s = dict(self.counts), dict(self.eager), dict(self.first_s)
        windows = {
            w: {"count": counts.get(w, 0), "eager": eager.get(w, 0), "first_s": first_s.get(w)} for w in self.measured()
        }
        # A window counted whose probe reads as unmeasured (a CUDA one before is_initialized
        # said so) is still reported: it opened.
        for w, n in counts.items():
            windows.setdefault(w, {"count": n, "eager": eager.get(w, 0), "first_s": first_s.get(w)})
        return {
            "version": FORMAT_VERSION,
            "final": final,
            "elapsed_s": round(self._clock() - self._t0, 6),
            "windows": dict(sorted(windows.items())),
        }

    def write(self, *, final: bool) -> None:
        if self.path is None:
            return
        data = json.dumps(self.snapshot(final=final), sort_keys=True)
        with self._write_lock:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(data + "\n")
            os.replace(tmp, self.path)


def _nested_trace_runs_eagerly() -> bool:
    """Whether this thread's compiled call, finding the FX flag set, runs eagerly instead of
    raising (error_on_nested_fx_trace off: the nested-fx-fallback fix; per thread on 2.13, F14)."""
    config = sys.modules.get("torch._dynamo.config")
    return config is not None and not getattr(config, "error_on_nested_fx_trace", True)


def _cudagraph_tls_seeded() -> bool:
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    torch = sys.modules.get("torch")
    if trees is None or torch is None:
        return True
    if hasattr(trees.local, "tree_manager_containers"):
        return True
    return bool(torch._C._is_key_in_tls("tree_manager_containers"))


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # a torch without CUDA support: nothing to measure
        return False


# ---------------------------------------------------------------------------------------------
# Installation in the child (bootstrap/sitecustomize.py) and reading the file (the runner).

_active: Exposure | None = None


OPTIONAL_POINTS = (RUN,)
"""Points that add openings where they resolve but do not decide whether a window is measured."""


def needed_points() -> list[str]:
    return sorted({name for p in PROBES.values() for name in p.points} | set(OPTIONAL_POINTS))


def install(path: str | None) -> Exposure:
    """Install every probe in this process, lazily (nothing is imported here)."""
    global _active
    if _active is not None:
        raise RuntimeError("exposure probes are already installed in this process")
    exposure = Exposure(path)
    points.install_lazily(needed_points(), exposure.hook)
    points.add_stage_handler(exposure.stage)
    atexit.register(exposure.write, final=True)
    _active = exposure
    return exposure


def active() -> Exposure | None:
    return _active


@dataclass(frozen=True, kw_only=True, slots=True)
class Reading:
    """One trial's file, as the runner records it."""

    counts: dict[str, int]
    """Measured window -> openings (0: measured, never opened)."""
    first_s: dict[str, float]
    """Opened window -> seconds from start-up to its first opening."""
    eager: dict[str, int]
    """Window -> openings whose call ran eagerly instead (only windows with some)."""
    final: bool
    """Written at exit; False: the child died first, counts are lower bounds."""


def read(path: str | os.PathLike[str]) -> Reading | None:
    """The file a child wrote; None when it wrote none or it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            data = json.load(f)
        windows = data["windows"]
        return Reading(
            counts={w: int(v["count"]) for w, v in windows.items()},
            first_s={w: float(v["first_s"]) for w, v in windows.items() if v.get("first_s") is not None},
            eager={w: int(v["eager"]) for w, v in windows.items() if v.get("eager")},
            final=bool(data.get("final")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
