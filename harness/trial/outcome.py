"""Typed outcomes of one trial, and the record the result store keeps for it.

An `Outcome` says how a trial ended; a `TrialResult` is everything the report needs about one
trial, and round-trips through JSON (one line of `trials.jsonl`), like CPython libregrtest's
`State` / `TestResult` pair.

Which outcomes are race failures: CRASH, ABORT, HANG and WRONG_RESULT. TIMEOUT is reported
separately: the workload kept making progress until the deadline, so it says the budget was too
small, not that a race happened (counting it would inflate failure rates on a loaded machine).
HARNESS_ERROR (bad spec, workload rejected its input, harness bug) is not a trial at all and is
left out of rates. RESOURCE is a crash of device-memory exhaustion (an out-of-memory error, a cuBLAS
workspace that could not be allocated): with 12 trials sharing the H200 (gpu-bound ones 19-21 GiB
each) 23 of the campaign's first 115 trials died so
(docs/log/2026-11-29-h200-campaign-first-115-trials.md); that measured the harness's packing, not
a race, so it is counted apart and left out of rates like TIMEOUT.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from harness.trial.cells import fixes_of, split_cell


class Outcome(enum.Enum):
    """How a trial ended. The value is what `trials.jsonl` stores."""

    OK = "ok"
    CRASH = "crash"
    ABORT = "abort"
    HANG = "hang"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness_error"
    RESOURCE = "resource"

    @property
    def is_failure(self) -> bool:
        """A race symptom: counts in failure rates (TIMEOUT and HARNESS_ERROR do not)."""
        return self in _FAILURES

    @property
    def counts_as_trial(self) -> bool:
        """Whether the trial enters rate denominators (HARNESS_ERROR, TIMEOUT, RESOURCE do not)."""
        return self not in (Outcome.HARNESS_ERROR, Outcome.TIMEOUT, Outcome.RESOURCE)

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_FAILURES = frozenset({Outcome.CRASH, Outcome.ABORT, Outcome.HANG, Outcome.WRONG_RESULT})

_DESCRIPTIONS = {
    Outcome.OK: "exited 0",
    Outcome.CRASH: "a Python exception failed it (non-zero exit, or a thread's uncaught exception at exit 0)",
    Outcome.ABORT: "killed by a signal or a fatal (native) error",
    Outcome.HANG: "idle, silent and at the same stacks for hang_s; dumped twice and killed",
    Outcome.WRONG_RESULT: "finished with a wrong answer (exit 3 or WRONG_RESULT: line)",
    Outcome.TIMEOUT: "still working (busy or printing) at the deadline; dumped and killed",
    Outcome.HARNESS_ERROR: "invalid spec, rejected input or harness failure",
    Outcome.RESOURCE: "ran out of device memory (an out-of-memory error or a failed cuBLAS allocation)",
}

SHOWN_AT_EXIT_0 = "exit 0, but the output shows "
"""A CRASH's detail where the run exited 0 but its output showed a race's face (stress counts it)."""
HARNESS_DEFECT = "harness defect:"
"""How the detail of a HARNESS_ERROR begins when the harness's own code, running inside the program
(a fix, the scheduler, a probe), raised the failure (trial.runner); stress and diagnose read it."""

RESOURCE_PATTERN = re.compile(
    r"OutOfMemoryError|\bout of memory\b|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED", re.I
)
"""What a device-memory exhaustion prints: torch.OutOfMemoryError (CUDA caching allocator),
`CUDA error: out of memory` (torch.AcceleratorError, a raw cudaMalloc), and cuBLAS/cuDNN failing to
allocate a handle's workspace (`CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)`),
all seen together with `GPU 0 ... of which 42.88 MiB is free` on the H200."""


def resource_exhaustion(result: TrialResult) -> bool:
    """A CRASH or ABORT whose signature says the device ran out of memory."""
    return (
        result.outcome in (Outcome.CRASH, Outcome.ABORT)
        and RESOURCE_PATTERN.search(f"{result.exc_type or ''} {result.signature_summary or ''}") is not None
    )


def mark_resource(result: TrialResult) -> None:
    """CRASH/ABORT -> RESOURCE when `resource_exhaustion`; the signature is kept (it says which
    allocation failed). The runner applies it to new trials, `from_json` to records stored before
    RESOURCE existed, so old and new stores summarize alike."""
    if resource_exhaustion(result):
        result.outcome = Outcome.RESOURCE


@dataclass(kw_only=True, slots=True)
class TrialResult:
    """One trial's record. Times are seconds; `started_at` is ISO-8601 UTC."""

    trial_id: str
    cell: str
    trial_index: int
    outcome: Outcome
    signature: str | None = None
    """`Signature.key` (stable short hash with a readable prefix); None for OK/TIMEOUT."""
    signature_summary: str | None = None
    """One human line for the signature, e.g. `AssertionError in dflash-train at ...`."""
    signature_version: int | None = None
    exc_type: str | None = None
    rc: int | None = None
    """Exit status as Popen reports it (negative = killed by that signal); None if never ran."""
    signal: str | None = None
    """Signal name (`SIGSEGV`) when the child died of a signal or a fatal error named one;
    None for HANG/TIMEOUT, where the SIGKILL (rc -9) was the harness's own."""
    detail: str = ""
    """One line: why this outcome (e.g. `workload rejected its input: error: ...`)."""
    duration_s: float = 0.0
    time_to_failure_s: float | None = None
    """Failures only: run time until the failure (for HANG, until the last progress seen)."""
    tokens_per_s: float | None = None
    final: dict[str, Any] | None = None
    """The workload's `{"event": "final", ...}` JSON line, when it printed one; else its
    `{"event": "failed", ...}` line (a dflash run that failed: the GPU memory it held by then)."""
    plan_seed: int | None = None
    artefacts: str = ""
    torch_version: str | None = None
    python: str = ""
    host: str = ""
    gpu: str | None = None
    """The GPUs the trial could see, by name (`NVIDIA H200`, `2x NVIDIA H200`; trial.gpu.names):
    None on a host without nvidia-smi. With `host` and `torch_version`, where it ran: the nodes of
    a Ray cluster (harness.campaign.ray_backend) need not be alike."""
    started_at: str = ""
    replay_of: str | None = None
    """trial_id this trial replays (same spec and plan), if any."""
    skipped: bool = False
    """The workload printed `SKIP: <why>` and exited 0 (e.g. needs CUDA); outcome stays OK."""
    gpu_released: bool | None = None
    """After the trial, no pid of it held GPU memory any more (nvidia-smi): True; some still did
    (a leak; noted in `detail`, outcome kept): False; None: not a GPU host, or could not tell."""
    gpu_mem_gib: float | None = None
    """The most GPU memory the trial's live processes held together on one GPU, in nvidia-smi's
    samples while it ran (every runner.GPU_MEM_POLL_S, and before a hung or timed-out trial is
    killed): a native crash or a hang has it too, and it counts the CUDA context. A lower bound
    (a crash's last sample may be up to one period old). None: not a GPU host, a trial shorter
    than one period, no sample saw memory held, or nvidia-smi could not tell."""
    exposures: dict[str, int] | None = None
    """How often each race's window opened in the trial (harness.faults.exposure: race id ->
    openings, 0 for a window measured that never opened). None: not measured (the trial ran with
    exposure off, or before the probes existed): a clean trial then says nothing of its window."""
    exposure_first_s: dict[str, float] | None = None
    """Seconds from the child's start-up to each opened window's first opening."""
    failures: list[dict] | None = None
    """Every distinct failure the run printed (signature.RunFailure.to_json: key, summary,
    exc_type, count, threads), in order of first appearance; `signature` is the run's first. A run
    may show several races. None for a run that printed none (or stored before this existed)."""
    thread_errors: int | None = None
    """Uncaught thread exceptions of the program's own threads and Futures that the child's hook
    recorded (None: none, or not recorded)."""
    noise: list[dict] | None = None
    """Exceptions of a library's own threads or Futures (Inductor's compile pool failing its pending
    Futures with `SubprocPool closed` as it closes at exit): thread, type, message and the frames
    that created it. Kept as evidence, never a failure."""
    threads_started: int | None = None
    """Threads the program itself started (library threads not counted); None: not recorded (the
    child died before exit, or the record predates it)."""
    hang_kind: str | None = None
    """A HANG's kind (trial.blocking): own-lock-cycle, own-lost-wakeup, own-wait, torch-wait, or
    fix-lock-cycle / fix-lock-wait (a `--fix` lock's wait: the fix deadlocks the program)."""
    exposure_eager: dict[str, int] | None = None
    """Openings whose compiled call took Dynamo's eager fallback instead (nested-fx-fallback):
    the window opened, but not on the compiled path the race needs."""
    workload: str | None = None
    """The cell's workload, strategy, the fixes that ran and the fault plan, as fields: what
    readers group and filter by. A record made without them (stored before they existed, or built
    by hand) gets them from its cell's name; `harness migrate` writes them into a store."""
    strategy: str | None = None
    fixes: list[str] | None = None
    plan: str | None = None

    def __post_init__(self) -> None:
        self.fill_cell_fields()

    def exposed(self, windows: Collection[str] | None = None) -> bool | None:
        """Whether a window (any of `windows`; every measured one if None) opened on the compiled
        path in this trial; None where none of them was measured."""
        if self.exposures is None:
            return None
        keys = [w for w in (self.exposures if windows is None else windows) if w in self.exposures]
        if not keys:
            return None
        eager = self.exposure_eager or {}
        return any(self.exposures[w] > eager.get(w, 0) for w in keys)

    @property
    def reported_gpu_peak_gib(self) -> float | None:
        """The workload's own figure: the allocator's peak on its busiest device (dflash's final or
        failed event, `gpu_mem_peak_gib`)."""
        figure = (self.final or {}).get("gpu_mem_peak_gib")
        if not isinstance(figure, dict):
            return None
        # A figure that is not a number (a device that could not say) is left out, not fatal:
        # every report and table reads this.
        values = [float(v) for v in figure.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return max(values) if values else None

    @property
    def gpu_peak_gib(self) -> float | None:
        """GiB the trial held on one GPU: the higher of its reported peak and the runner's samples
        (`gpu_mem_gib`, which native crashes and hangs have too)."""
        figures = [f for f in (self.reported_gpu_peak_gib, self.gpu_mem_gib) if f is not None]
        return max(figures) if figures else None

    @property
    def matrix(self) -> str:
        """The matrix that ran it: a trial id is `MATRIX/CELL/INDEX` (matrix.expand)."""
        return self.trial_id.split("/", 1)[0]

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["outcome"] = self.outcome.value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialResult:
        """Inverse of `to_json`. Unknown keys are ignored (records from newer versions load)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["outcome"] = Outcome(data["outcome"])
        result = cls(**kwargs)
        mark_resource(result)
        return result

    def fill_cell_fields(self) -> bool:
        """Set the workload/strategy/fixes/plan fields a record stored before them lacks, from its
        cell's name; whether any was missing."""
        if None not in (self.workload, self.strategy, self.fixes, self.plan):
            return False
        workload, strategy, plan = split_cell(self.cell)
        self.workload = self.workload if self.workload is not None else workload
        self.strategy = self.strategy if self.strategy is not None else strategy
        self.plan = self.plan if self.plan is not None else plan
        self.fixes = self.fixes if self.fixes is not None else fixes_of(strategy)
        return True
