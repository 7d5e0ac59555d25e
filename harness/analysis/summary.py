"""Per-cell summaries of stored trials: counts, rates with their intervals, signatures and
failure families, time to the first failure, throughput and GPU memory.

Everything here is a function of the stored records alone (no clock, no spec), so the same store
gives the same summaries. Cells are ordered by workload, then strategy (`raw` first), then plan.

Exposure (harness.faults.exposure): a cell counts the trials in which its windows opened, a
repro's the windows of its catalogued races, any other workload's every window it measured. A
0/n is evidence only where the window opened: a fix can keep it shut (a lock that serialises the
tracer and the call) or defuse it (nested-fx-fallback runs the call eagerly), which reads as
"window never opened", not as clean; records from before the probes read "not measured".

Rates are k/n with a Wilson 95% interval (Wilson 1927), and at k = 0 the rule-of-three bound 3/n as
well ("p < 3/n (95%)"; Jovanovic & Levy, "A look at the Rule of Three", 1997); TIMEOUT and
HARNESS_ERROR trials are counted apart and are not in n. tokens/s is compared with the fastest clean
(k = 0) cell of the same workload, because workloads differ in size.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness import stats
from harness.diagnosis import families
from harness.diagnosis.catalogue import load as load_catalogue
from harness.trial.cells import NO_PLAN
from harness.trial.outcome import Outcome, TrialResult


@dataclass(kw_only=True, slots=True)
class CellSummary:
    cell: str
    workload: str
    strategy: str
    plan: str
    n: int
    """Trials that count (not TIMEOUT, not HARNESS_ERROR)."""
    k: int
    """Failures among them (CRASH, ABORT, HANG, WRONG_RESULT)."""
    timeouts: int
    errors: int
    skipped: int
    """OK trials whose workload printed SKIP (e.g. needs CUDA): they prove nothing."""
    low: float
    high: float
    rule_of_three: float | None
    """3/n when k == 0 and n > 0."""
    outcomes: dict[str, int]
    resources: int = 0
    """RESOURCE trials (device memory exhausted): shown as +N oom, left out of k/n."""
    families: list[tuple[str, int]] = field(default_factory=list)
    """(failure family of harness.diagnosis.families, count) over the failing trials, most frequent first."""
    signatures: list[tuple[str, int]] = field(default_factory=list)
    """(signature summary, count), most frequent first."""
    ttff_s: float | None = None
    """Median serial time to the first failure (stats.median_time_to_first_failure)."""
    median_duration_s: float | None = None
    tokens_per_s: float | None = None
    tokens_range: tuple[float, float] | None = None
    """Slowest and fastest trial behind the median: trials that share a GPU move with their
    neighbours (gpu-campaign's gpu-bound no-cudagraphs+global-lock ran 9,882-42,922 tokens/s)."""
    tokens_ratio: float | None = None
    """tokens_per_s / the fastest clean cell's of the same workload measured where and when this
    one was (`measured_on`): tokens/s of two days or two hosts are not one price."""
    measured_on: tuple[str, str] | None = None
    """(host, UTC day) most of the cell's tokens/s trials ran on; None without a figure."""
    gpu_peak_gib: float | None = None
    """The most one trial of the cell held on one GPU (`TrialResult.gpu_peak_gib`): what a fix
    costs in memory."""
    fisher_p: float | None = None
    """One-sided Fisher exact p that this strategy fails less often than `raw` under the same
    workload and plan (the before/after test of a fix); None for raw itself."""
    windows: tuple[str, ...] | None = None
    """The exposure windows the cell is judged by (catalogue.windows_of): None = every window its
    trials measured; () = its races have no probe."""
    measured: int = 0
    """Counted trials whose exposure was measured for those windows."""
    exposed: int = 0
    """Of those, trials in which a window opened on the compiled path."""
    eager_only: int = 0
    """Trials in which a window opened only as calls that ran eagerly (nested-fx-fallback)."""
    openings: int = 0
    """Window openings over the counted trials, eager ones included."""
    eager_openings: int = 0
    first_open_s: float | None = None
    """Median seconds from start-up to the first opening, over the exposed trials."""
    by_window: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Window -> (trials measured, trials it opened in, openings, openings run eagerly), for the
    per-window lines."""

    @property
    def unexposed(self) -> int:
        """Measured trials whose window never opened on the compiled path: no evidence either way."""
        return self.measured - self.exposed


def _cell_key(c: CellSummary) -> tuple:
    return (c.workload, c.strategy != "raw", c.strategy, c.plan != NO_PLAN, c.plan)


def summarize(records: Iterable[TrialResult]) -> list[CellSummary]:
    by_cell: dict[str, list[TrialResult]] = collections.defaultdict(list)
    for r in records:
        if r.replay_of is None:
            by_cell[r.cell].append(r)
    cells = [_summarize_cell(c, sorted(rs, key=lambda r: r.trial_index)) for c, rs in by_cell.items()]
    cells.sort(key=_cell_key)
    _fill_ratios(cells)
    _fill_fisher(cells)
    return cells


def _summarize_cell(cell: str, rs: list[TrialResult]) -> CellSummary:
    counted = [r for r in rs if r.outcome.counts_as_trial]
    n, k = len(counted), sum(r.outcome.is_failure for r in counted)
    ci = stats.wilson(k, n)
    # Every record of a cell carries the same parts (TrialResult.workload, strategy, plan).
    w, s, p = rs[0].workload or cell, rs[0].strategy or "", rs[0].plan or NO_PLAN
    return CellSummary(
        cell=cell,
        workload=w,
        strategy=s,
        plan=p,
        n=n,
        k=k,
        **_exposure(counted, load_catalogue().windows_of(w)),
        timeouts=sum(r.outcome is Outcome.TIMEOUT for r in rs),
        errors=sum(r.outcome is Outcome.HARNESS_ERROR for r in rs),
        resources=sum(r.outcome is Outcome.RESOURCE for r in rs),
        skipped=sum(bool(r.skipped) for r in rs),
        low=ci.low,
        high=ci.high,
        rule_of_three=stats.rule_of_three(n) if k == 0 and n else None,
        outcomes=dict(sorted(collections.Counter(r.outcome.name for r in rs).items())),
        **_failure_fields(counted),
        **_speed_fields(counted, rs),
    )


def _failure_fields(counted: list[TrialResult]) -> dict:
    """CellSummary's signatures, families and time to the first failure over the counted trials."""
    failing = [r for r in counted if r.outcome.is_failure]
    sig_counts = collections.Counter(r.signature or "?" for r in failing)
    names = {}
    for r in failing:
        names.setdefault(r.signature or "?", r.signature_summary or r.signature or r.outcome.name)
    # Time to failure, not run time, for failing trials: a run that crashes at 2 s of a 60 s
    # budget says the failure takes 2 s to show.
    times = [
        (r.time_to_failure_s if r.outcome.is_failure and r.time_to_failure_s is not None else r.duration_s)
        for r in counted
    ]
    fams = collections.Counter(families.family(r.signature_summary) for r in failing)
    return dict(
        signatures=sorted(((names[s], c) for s, c in sig_counts.items()), key=lambda sc: (-sc[1], sc[0])),
        families=sorted(fams.items(), key=lambda fc: (-fc[1], fc[0])),
        ttff_s=stats.median_time_to_first_failure(times, [r.outcome.is_failure for r in counted]) if counted else None,
    )


def _speed_fields(counted: list[TrialResult], rs: list[TrialResult]) -> dict:
    """CellSummary's run time, tokens/s (with where most were measured) and GPU memory peak."""
    with_tokens = [r for r in counted if r.tokens_per_s is not None and not r.outcome.is_failure]
    tokens = [r.tokens_per_s for r in with_tokens]
    where = collections.Counter((r.host or "?", (r.started_at or "?")[:10]) for r in with_tokens)
    peaks = [p for p in (r.gpu_peak_gib for r in rs) if p is not None]
    return dict(
        median_duration_s=stats.median_or_none([r.duration_s for r in counted]),
        tokens_per_s=stats.median_or_none(tokens),
        tokens_range=(min(tokens), max(tokens)) if tokens else None,
        measured_on=where.most_common(1)[0][0] if where else None,
        gpu_peak_gib=max(peaks) if peaks else None,
    )


def _exposure(counted: list[TrialResult], windows: tuple[str, ...] | None) -> dict:
    """CellSummary's exposure fields over the counted trials."""
    measured = exposed = eager_only = openings = eager_openings = 0
    firsts: list[float] = []
    by_window: dict[str, list[int]] = {}
    for r in counted:
        counts = r.exposures
        if counts is None:
            continue
        keys = [w for w in (sorted(counts) if windows is None else windows) if w in counts]
        if not keys:
            continue
        measured += 1
        eager = r.exposure_eager or {}
        opened = sum(counts[w] for w in keys)
        openings += opened
        eager_openings += sum(eager.get(w, 0) for w in keys)
        if r.exposed(keys):
            exposed += 1
            times = [(r.exposure_first_s or {}).get(w) for w in keys if counts[w] > eager.get(w, 0)]
            times = [t for t in times if t is not None]
            if times:
                firsts.append(min(times))
        elif opened:
            eager_only += 1
        for w in keys:
            row = by_window.setdefault(w, [0, 0, 0, 0])
            row[0] += 1
            row[1] += counts[w] > 0
            row[2] += counts[w]
            row[3] += eager.get(w, 0)
    return dict(
        windows=windows,
        measured=measured,
        exposed=exposed,
        eager_only=eager_only,
        openings=openings,
        eager_openings=eager_openings,
        first_open_s=stats.median_or_none(firsts),
        by_window={w: tuple(v) for w, v in sorted(by_window.items())},
    )


def _fill_ratios(cells: list[CellSummary]) -> None:
    """vs best within one workload, host and day: a store's cells ran on several days (and hosts)
    whose tokens/s are not comparable (gpu-phase's default cells: one clean cell's trials two at a
    time beside another job, another's alone on another day)."""
    best: dict[tuple, float] = {}
    for c in cells:
        if c.k == 0 and c.n > 0 and c.tokens_per_s:
            key = (c.workload, c.measured_on)
            best[key] = max(best.get(key, 0.0), c.tokens_per_s)
    for c in cells:
        if c.tokens_per_s is not None and best.get((c.workload, c.measured_on)):
            c.tokens_ratio = c.tokens_per_s / best[(c.workload, c.measured_on)]


def _fill_fisher(cells: list[CellSummary]) -> None:
    from scipy.stats import fisher_exact  # seconds to import: only when a comparison exists

    raw = {(c.workload, c.plan): c for c in cells if c.strategy == "raw"}
    for c in cells:
        base = raw.get((c.workload, c.plan))
        if c.strategy == "raw" or base is None or not c.n or not base.n:
            continue
        table = [[c.k, c.n - c.k], [base.k, base.n - base.k]]
        c.fisher_p = float(fisher_exact(table, alternative="less").pvalue)
