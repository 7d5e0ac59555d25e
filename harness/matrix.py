"""Matrix specs: workloads x strategies x fault plans x trials, expanded into deterministic trials.

A `MatrixSpec` holds named workloads and strategies and one or more groups; each group is the
product of some workloads, strategies and plans (so a repro is only crossed with the fixes that
apply to it). `expand()` turns the spec into `TrialSpec`s with ids `<matrix>/<cell>/<i>`, where a
cell is named `<workload>:<strategy>@<plan>` (`@-` without a plan).

Plan seeds are `seed + i` for trial i of every cell: strategies are compared under identical
schedules (common random numbers), which sharpens raw-vs-fix comparisons, and a rerun of the same
spec produces the same ids and seeds, which is what resume relies on.

Specs come from `harness.presets` (named matrices and the JSON file form). `expand()` validates
fixes against `dflash.fixes.FIXES`, plans against the scheduler and workload files against the
disk, so bad input fails before anything is run or written.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.outcome import Outcome, TrialResult
from harness.spec import REPO_ROOT, WORKLOAD_KINDS, TrialSpec, WorkloadSpec

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_HANG_S = 60.0


class MatrixError(ValueError):
    """A matrix spec the user can fix: unknown strategy, malformed plan, missing workload."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Workload:
    name: str
    """Short name used in cell names (`r06`, `dflash-tiny`)."""
    kind: str
    """`dflash` (argv after `python -m dflash train`), `repro` (bare script name under repro/, then
    its arguments) or `command` (the full argv, run from the repository root)."""
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Deadline of one trial; past it the trial is killed (HANG or TIMEOUT)."""
    hang_s: float = DEFAULT_HANG_S
    """No heartbeat change and no output growth for this long means HANG."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment for the trial process."""
    gpus: int = 0
    """GPUs one trial of this workload occupies (0 = CPU only)."""

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise MatrixError(f"workload {self.name!r}: kind must be one of {WORKLOAD_KINDS}, got {self.kind!r}")
        if not self.argv:
            raise MatrixError(f"workload {self.name!r}: argv is empty")
        if self.timeout_s <= 0 or self.hang_s <= 0:
            raise MatrixError(f"workload {self.name!r}: timeout_s and hang_s must be > 0")
        if self.gpus < 0:
            raise MatrixError(f"workload {self.name!r}: gpus must be >= 0")
        check_name(self.name, "workload")


@dataclass(kw_only=True, slots=True, frozen=True)
class Strategy:
    name: str
    """`raw`, a fix name, `a+b` for a combination, or a free name for override-only strategies."""
    fixes: tuple[str, ...] = ()
    """Names from `dflash.fixes.FIXES`, passed as `--set fixes=...` (dflash) or `--fix` (repro)."""
    sets: tuple[str, ...] = ()
    """Extra `section.key=value` overrides for dflash workloads (e.g. `compile.mode=none`)."""

    def __post_init__(self) -> None:
        check_name(self.name, "strategy")


@dataclass(kw_only=True, slots=True, frozen=True)
class PlanChoice:
    name: str
    """Label in cell names; the profile name for seeded plans, `-` for no plan."""
    profile: str | None = None
    """Scheduler profile: the trial's plan is `Plan.from_seed(seed, profile)`."""
    explicit: dict[str, Any] | None = None
    """A fixed plan (the JSON of `Plan.to_json`), the same for every trial."""


NO_PLAN = PlanChoice(name="-")


@dataclass(kw_only=True, slots=True, frozen=True)
class Group:
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    plans: tuple[PlanChoice, ...] = (NO_PLAN,)
    trials: int | None = None
    """Trials per cell in this group; None = the matrix default."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Cell:
    workload: Workload
    strategy: Strategy
    plan: PlanChoice
    trials: int

    @property
    def name(self) -> str:
        return f"{self.workload.name}:{self.strategy.name}@{self.plan.name}"


@dataclass(kw_only=True, slots=True)
class MatrixSpec:
    name: str
    """Matrix name: trial ids start with it and the default store is results/<name>."""
    workloads: dict[str, Workload]
    strategies: dict[str, Strategy]
    groups: tuple[Group, ...]
    trials: int = 10
    """Trials per cell (the max-trials stop rule), unless a group says otherwise."""
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    """Trials running at once."""
    per_gpu: int = 1
    """On GPU hosts: trials sharing one GPU at once."""
    max_failures: int | None = None
    """Stop scheduling a cell once it has this many failures (None = never)."""
    max_time_s: float | None = None
    """Start no new trial after this many seconds of the whole matrix (None = no limit)."""
    seed: int = 0
    """Trial i of every cell gets plan seed `seed + i`."""
    store: str | None = None
    """Store folder; None = results/<name>."""

    def __post_init__(self) -> None:
        check_name(self.name, "matrix")
        if self.trials < 1 or self.workers < 1 or self.per_gpu < 1:
            raise MatrixError("trials, workers and per_gpu must be >= 1")
        if self.max_failures is not None and self.max_failures < 1:
            raise MatrixError("max_failures must be >= 1")
        if self.max_time_s is not None and self.max_time_s <= 0:
            raise MatrixError("max_time_s must be > 0")
        if not self.groups:
            raise MatrixError(f"matrix {self.name!r} has no cells")
        for group in self.groups:
            _check_group(self, group)

    @property
    def store_dir(self) -> Path:
        return Path(self.store) if self.store else Path("results") / self.name

    def cells(self) -> list[Cell]:
        """All cells in group order; a cell listed twice is an error (its ids would collide)."""
        cells: list[Cell] = []
        seen: set[str] = set()
        for group in self.groups:
            for w in group.workloads:
                for s in group.strategies:
                    for p in group.plans:
                        cell = Cell(workload=self.workloads[w], strategy=self.strategies[s], plan=p,
                                    trials=group.trials or self.trials)
                        if cell.name in seen:
                            raise MatrixError(f"cell {cell.name!r} appears twice in matrix {self.name!r}")
                        seen.add(cell.name)
                        cells.append(cell)
        return cells


def check_name(name: str, what: str) -> None:
    # Names end up in trial ids and folder names: keep them to a safe alphabet.
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+")
    if not name or not set(name) <= allowed:
        raise MatrixError(f"{what} name {name!r} must be non-empty and use only letters, digits and -_.+")


def _check_group(spec: MatrixSpec, group: Group) -> None:
    for w in group.workloads:
        if w not in spec.workloads:
            raise MatrixError(f"unknown workload {w!r} (known: {', '.join(sorted(spec.workloads))})")
    for s in group.strategies:
        if s not in spec.strategies:
            raise MatrixError(f"unknown strategy {s!r} (known: {', '.join(sorted(spec.strategies))})")
    if not (group.workloads and group.strategies and group.plans):
        raise MatrixError("a group needs at least one workload, strategy and plan")
    if group.trials is not None and group.trials < 1:
        raise MatrixError("group trials must be >= 1")


# --- expansion -----------------------------------------------------------------------------------


def expand(spec: MatrixSpec) -> list[TrialSpec]:
    """Every trial of every cell, cell by cell; raises MatrixError before anything runs."""
    cells = spec.cells()
    check_cells(cells)
    trials = []
    for cell in cells:
        argv = cell.workload.argv + tuple(a for kv in cell.strategy.sets for a in ("--set", kv))
        for i in range(cell.trials):
            trials.append(TrialSpec(
                trial_id=f"{spec.name}/{cell.name}/{i}", cell=cell.name,
                workload=WorkloadSpec(kind=cell.workload.kind, argv=argv), fixes=cell.strategy.fixes,
                plan=plan_json(cell.plan, spec.seed + i), env=dict(cell.workload.env),
                timeout_s=cell.workload.timeout_s, hang_s=cell.workload.hang_s, trial_index=i,
            ))
    return trials


def check_cells(cells: list[Cell]) -> None:
    """Fix names, strategy/workload compatibility, workload files and plans, checked up front."""
    from dflash.fixes import FIXES  # no torch import: cheap

    for cell in cells:
        w, s = cell.workload, cell.strategy
        for fix in s.fixes:
            if fix not in FIXES:
                raise MatrixError(f"unknown strategy {s.name!r}: no fix named {fix!r} "
                                  f"(fixes: {', '.join(sorted(FIXES))})")
        if s.fixes and w.kind == "command":
            raise MatrixError(f"strategy {s.name!r} has fixes but workload {w.name!r} is a command")
        if s.sets and w.kind != "dflash":
            raise MatrixError(f"strategy {s.name!r} has --set overrides but workload {w.name!r} is not dflash")
        check_workload_files(w)
        plan_json(cell.plan, 0)


def check_workload_files(w: Workload) -> None:
    """What is missing before a run: a repro script, a program or script, a dflash preset."""
    if w.kind == "dflash":
        from dflash.presets import PRESETS  # no torch import: cheap

        args = list(w.argv)
        for flag, value in zip(args, args[1:]):
            if flag == "--preset" and value not in PRESETS:
                raise MatrixError(f"workload {w.name!r}: no dflash preset {value!r} (known: {', '.join(PRESETS)})")
    elif w.kind == "repro":
        script = w.argv[0] if w.argv[0].endswith(".py") else w.argv[0] + ".py"
        if "/" in script or not (REPO_ROOT / "repro" / script).is_file():
            raise MatrixError(f"workload {w.name!r}: no repro script repro/{script}")
    elif w.kind == "command":
        prog = w.argv[0]
        if "/" in prog:
            found = (REPO_ROOT / prog).is_file() or Path(prog).is_file()
        else:
            found = shutil.which(prog) is not None
        if not found:
            raise MatrixError(f"workload {w.name!r}: program {prog!r} not found")
        # A script argument of an interpreter is the usual way to be missing: check it too.
        if Path(prog).name.startswith("python") and len(w.argv) > 1 and w.argv[1].endswith(".py"):
            script = Path(w.argv[1])
            if not (script.is_file() or (REPO_ROOT / script).is_file()):
                raise MatrixError(f"workload {w.name!r}: script {w.argv[1]!r} not found")


def plan_json(choice: PlanChoice, seed: int) -> dict[str, Any] | None:
    """The plan a trial carries: derived from its profile, or the explicit plan with this trial's
    seed (so runtime decisions vary across trials like a profile's do), or None."""
    if choice.profile is None and choice.explicit is None:
        return None
    from harness.scheduler import InvalidPlan, Plan

    try:
        if choice.profile is not None:
            return Plan.from_seed(seed, choice.profile).to_dict()
        return Plan.from_dict({**choice.explicit, "seed": seed}).to_dict()
    except (InvalidPlan, ValueError) as e:
        raise MatrixError(f"malformed plan {choice.name!r}: {e}") from None


# --- running ---------------------------------------------------------------------------------------

JOIN_MARGIN_S = 60.0
"""Past a trial's own deadline, how long a worker may take to return before it counts as stuck."""


@dataclass(kw_only=True, slots=True)
class CellState:
    """Live counts of one cell (stored records included, so a resumed matrix shows totals)."""

    name: str
    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    errors: int = 0
    skipped_by_rule: int = 0

    def add(self, result: TrialResult) -> None:
        if result.outcome.counts_as_trial:
            self.runs += 1
            self.failures += result.outcome.is_failure
        elif result.outcome is Outcome.TIMEOUT:
            self.timeouts += 1
        else:
            self.errors += 1

    def line(self, elapsed_s: float) -> str:
        """Go stress style: `1m05s: cell: 12 runs so far, 3 failures (25.00%)`."""
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        extra = "".join([
            f", {self.timeouts} timeouts" if self.timeouts else "",
            f", {self.errors} harness errors" if self.errors else "",
            f", {self.skipped_by_rule} left by stop rules" if self.skipped_by_rule else "",
        ])
        return f"{format_elapsed(elapsed_s)}: {self.name}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%){extra}"


@dataclass(kw_only=True, slots=True)
class MatrixRun:
    spec: MatrixSpec
    records: list[TrialResult]
    """Every stored record of this matrix's cells, including ones from earlier (resumed) runs."""
    ran: int
    """Trials run by this invocation."""
    resumed: int
    """Planned trials found in the store and not run again."""
    left: int
    """Planned trials not run because a stop rule (max failures, max time) ended them."""
    elapsed_s: float


def format_elapsed(s: float) -> str:
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s"


def host_gpu_count() -> int:
    """GPUs visible to this process: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L` lines."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


class GpuSlots:
    """At most `per_gpu` trials on each GPU at once; a trial needing g GPUs takes g distinct ones."""

    def __init__(self, num_gpus: int, per_gpu: int) -> None:
        self._load = [0] * num_gpus
        self._per_gpu = per_gpu
        self._cond = threading.Condition()

    def acquire(self, need: int, stop: threading.Event) -> list[int] | None:
        """Least-loaded GPUs with room; None if `stop` is set while waiting."""
        if need == 0 or not self._load:
            return []
        need = min(need, len(self._load))
        with self._cond:
            while not stop.is_set():
                free = sorted((load, i) for i, load in enumerate(self._load) if load < self._per_gpu)
                if len(free) >= need:
                    ids = sorted(i for _, i in free[:need])
                    for i in ids:
                        self._load[i] += 1
                    return ids
                self._cond.wait(timeout=0.5)
        return None

    def release(self, ids: list[int]) -> None:
        with self._cond:
            for i in ids:
                self._load[i] -= 1
            self._cond.notify_all()


def with_run_dir(trial: TrialSpec, artefacts: Path) -> TrialSpec:
    """A dflash trial writes its checkpoints and export under its own artefacts folder: presets
    share one `train.out_dir`, and concurrent trials must not overwrite each other's files."""
    if trial.workload.kind != "dflash":
        return trial
    argv = trial.workload.argv + ("--set", f"train.out_dir={Path(artefacts).resolve() / 'run'}")
    return dataclasses.replace(trial, workload=WorkloadSpec(kind="dflash", argv=argv))


STATUS_INTERVAL_S = 60.0
"""Without a terminal, how often a `N trials done, R running` line is printed between trials."""


class LiveLines:
    """One line per cell on stderr. On a terminal the lines update in place (rich.live) and the
    clock ticks every second; otherwise the changed cell's line is printed after every trial,
    plus a status line every STATUS_INTERVAL_S, which keeps logs readable."""

    def __init__(self, cells: list[CellState], stream: TextIO, live: bool) -> None:
        self._cells = cells
        self._stream = stream
        self._start = time.monotonic()
        self._next_tick = self._start
        self._live = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(file=stream), refresh_per_second=2,
                              auto_refresh=False)
            self._live.start()

    def _render(self):  # -> rich.text.Text
        from rich.text import Text

        elapsed = time.monotonic() - self._start
        return Text("\n".join(c.line(elapsed) for c in self._cells))

    def update(self, cell: CellState) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            print(cell.line(time.monotonic() - self._start), file=self._stream, flush=True)

    def tick(self, done: int, running: int, pending: int) -> None:
        now = time.monotonic()
        if now < self._next_tick:
            return
        if self._live is not None:
            self._next_tick = now + 1.0
            self._live.update(self._render(), refresh=True)
        else:
            if now > self._start + 1.0:
                print(f"{format_elapsed(now - self._start)}: {done} trials done, {running} running, "
                      f"{pending} pending", file=self._stream, flush=True)
            self._next_tick = now + STATUS_INTERVAL_S

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()


def run_matrix(spec: MatrixSpec, *, stream: TextIO | None = None, live: bool | None = None,
               num_gpus: int | None = None, run_fn: Callable[[TrialSpec, Path], TrialResult] | None = None,
               ) -> MatrixRun:
    """Run every planned trial not already in the store; returns all of this matrix's records.

    Validation (expand) happens before the store is opened, so bad input leaves it untouched.
    """
    from harness.runner import run_trial
    from harness.store import Store

    trials = expand(spec)
    stream = stream or sys.stderr
    store = Store(spec.store_dir)
    cells = {c.name: c for c in spec.cells()}
    existing = [r for r in store.load() if r.cell in cells]
    done = {r.trial_id for r in existing}
    states = {name: CellState(name=name) for name in cells}
    for r in existing:
        states[r.cell].add(r)
    # Trial 0 of every cell, then trial 1, ...: a time limit leaves cells evenly covered.
    order = {name: k for k, name in enumerate(cells)}
    pending = sorted((t for t in trials if t.trial_id not in done), key=lambda t: (t.trial_index, order[t.cell]))
    gpus = GpuSlots(host_gpu_count() if num_gpus is None else num_gpus, spec.per_gpu)
    live_lines = LiveLines(list(states.values()), stream, stream.isatty() if live is None else live)
    pool = _Pool(spec=spec, pending=pending, states=states, store=store, gpus=gpus, lines=live_lines,
                 need_gpus={n: c.workload.gpus for n, c in cells.items()}, run_fn=run_fn or run_trial)
    start = time.monotonic()
    try:
        new = pool.run()
    finally:
        live_lines.close()
    return MatrixRun(spec=spec, records=existing + new, ran=len(new), resumed=len(trials) - len(pending),
                     left=pool.left, elapsed_s=time.monotonic() - start)


def kill_child_groups() -> int:
    """SIGKILL the process group of every direct child that leads its own group (the runner
    starts each trial with start_new_session=True); Linux /proc. Returns how many."""
    me, killed = os.getpid(), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid, pgid = int(stat.parent.name), int(fields[1]), int(fields[2])
        if ppid == me and pgid == pid:
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class _Pool:
    """Named worker threads pulling trials from one queue; first worker exception stops the rest."""

    def __init__(self, *, spec, pending, states, store, gpus, lines, need_gpus, run_fn) -> None:
        self.spec = spec
        self.pending = collections.deque(pending)
        self.states = states
        self.store = store
        self.gpus = gpus
        self.lines = lines
        self.need_gpus = need_gpus
        self.run_fn = run_fn
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.results: list[TrialResult] = []
        self.left = 0
        self.running = 0
        self.interrupted = False
        self.deadline = None if spec.max_time_s is None else time.monotonic() + spec.max_time_s

    def run(self) -> list[TrialResult]:
        n = max(1, min(self.spec.workers, len(self.pending)))
        threads = [threading.Thread(target=self._worker, name=f"harness-worker-{k}") for k in range(n)]
        for t in threads:
            t.start()
        try:
            # Short joins keep the main thread responsive to Ctrl-C.
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.1)
                with self.lock:
                    done, pending = len(self.results), len(self.pending)
                self.lines.tick(done, self.running, pending)
        except KeyboardInterrupt:
            # Trials run in their own sessions, so Ctrl-C does not reach them. Kill them, and do not
            # record them: a killed trial is an interrupted measurement, not an ABORT, and the next
            # run of the same command runs it again (resume).
            with self.lock:
                self.interrupted = True
            self.stop.set()
            killed = kill_child_groups()
            print(f"interrupted: killed {killed} running trial(s); they will rerun on resume",
                  file=sys.stderr, flush=True)
            self._join(threads)
            raise
        self._join(threads)
        if self.errors:
            raise ExceptionGroup("matrix worker failed", self.errors)
        return self.results

    def _join(self, threads: list[threading.Thread]) -> None:
        longest = max((c.timeout_s for c in self.spec.workloads.values()), default=0.0)
        deadline = time.monotonic() + longest + JOIN_MARGIN_S
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise RuntimeError(f"matrix workers still running after their deadline: {stuck}")

    def _next(self) -> TrialSpec | None:
        with self.lock:
            while self.pending and not self.stop.is_set():
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    break
                trial = self.pending.popleft()
                state = self.states[trial.cell]
                if self.spec.max_failures is not None and state.failures >= self.spec.max_failures:
                    state.skipped_by_rule += 1
                    self.left += 1
                    continue
                return trial
            self.left += len(self.pending)
            self.pending.clear()
            return None

    def _worker(self) -> None:
        try:
            while (trial := self._next()) is not None:
                ids = self.gpus.acquire(self.need_gpus[trial.cell], self.stop)
                if ids is None:
                    return
                with self.lock:
                    # A trial popped before the deadline may wait minutes for a GPU slot; it must
                    # not start after --max-time (an H200 call overran its budget that way).
                    late = self.deadline is not None and time.monotonic() >= self.deadline
                    if late:
                        self.left += 1
                    else:
                        self.running += 1
                if late:
                    self.gpus.release(ids)
                    continue
                try:
                    if ids:
                        trial.env = {**trial.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))}
                    artefacts = self.store.artefacts_dir(trial.trial_id)
                    result = self.run_fn(with_run_dir(trial, artefacts), artefacts)
                finally:
                    self.gpus.release(ids)
                with self.lock:
                    self.running -= 1
                    if self.interrupted:
                        return
                    self.store.append(result)
                    self.results.append(result)
                    self.states[trial.cell].add(result)
                    self.lines.update(self.states[trial.cell])
        except BaseException as e:  # surfaced by run() as an ExceptionGroup
            with self.lock:
                self.errors.append(e)
            self.stop.set()
