"""Which configuration to recommend per workload, from cell summaries alone (the campaign's rule).

A strategy qualifies for a workload when every one of its cells is clean (k = 0) and its cells
under a fault plan hold at least MIN_STRESSED trials together: 29 clean trials put the 95% upper
bound on the failure rate under 10% (rule of three), so a 10% failure rate would have shown with
95% probability. Baselines are not candidates: `raw` (the bug), `eager` (no compile) and
`global-lock` (no concurrency); they are what a qualifying strategy is priced against. The
recommendation is the qualifying strategy with the highest tokens/s in its plain cell (no plan:
the scheduler's delays slow the stressed cells); without throughput figures (repro workloads)
every qualifying strategy is listed. When nothing qualifies, that is the verdict, with the clean
strategies that lack trials and the failing ones named, rather than a lucky cell.

Where a trial measured its exposure (harness.faults.exposure) and its cell's window never opened
on the compiled path, it is no stressed trial of a fix: a lock that keeps the window shut or a
fallback that runs the call eagerly was never put to the race. Such trials count in n but not
toward MIN_STRESSED, and the verdict says how many there were. Trials recorded before the probes
count as they always did, so the verdicts on those stores stand.

Eager is a cell too, and the campaign asks for the fastest cell that stays clean: when eager itself
qualifies (clean, MIN_STRESSED stressed trials) and no compiled strategy does, or eager runs faster
than the one that does, the verdict recommends eager (do not compile) and says what the compiled
candidates cost against it. "Faster" is read from `dflash bench` runs alone on the GPU where one
GPU-host run benched both (the campaign's medians move with the trials that shared the GPU), else
from the campaign's plain cells. On the H200's gpu-bound preset (torch 2.11, 2026-12-01) the GPU is 98%
busy with either, and Inductor's kernels are slower than eager's.

Where the lock is the only fix a workload tries (a catalogue entry whose documented fix it is), it
is the candidate there, judged by the same rule. A strategy that contains `global-lock` qualifies
like any other, but it serialises the compiled calls: the question users pay for is whether a
concurrent configuration is clean and worth it. So the verdict also names the fastest qualifying
concurrent strategy and prices it against the fastest qualifying serialised one (the plain
`global-lock` when nothing else is), against TARGET_OVER_LOCK (the campaign's target: at least
1.2x the global lock), or says that none qualifies. That price is read alone on the GPU where one
run benched both (the median of a run's benches of one strategy; where one `harness price` run benched both
in rounds, the median of the per-round ratios), else from the campaign's medians, which say so.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.trial.cells import NO_PLAN, strategy_parts

MIN_STRESSED = 29
BASELINES = ("raw", "eager", "global-lock")
LOCK, EAGER = "global-lock", "eager"
NO_RUN = -1
"""_benched's key for benches without a run number (a `harness price` run outside the GPU-host runs)."""
TARGET_OVER_LOCK = 1.2
NOISY_SPREAD = 1.5
"""A priced cell whose fastest trial ran more than this many times its slowest is named with its
range: trials that share a GPU move with their neighbours (gpu-campaign, 2026-11-30: one gpu-bound
cell ran 9,882-42,922 tokens/s), and a ratio of two such medians is a hint, not a cost."""


def holds(strategy: str, fix: str) -> bool:
    """Whether a `+`-joined strategy name holds `fix` (a whole name: `cstash-tls-init-like` does not
    hold `cstash-tls-init`). The one reading of strategy names for recommend, benches and crosstab."""
    return fix in strategy_parts(strategy)


def serialised(strategy: str) -> bool:
    """Whether the strategy holds the process-wide lock around every compiled call."""
    return holds(strategy, LOCK)


@dataclass(kw_only=True, slots=True)
class StrategyTotals:
    strategy: str
    k: int = 0
    n: int = 0
    n_stressed: int = 0
    """Trials under a fault plan, less those whose measured window never opened."""
    n_unexposed: int = 0
    """Stressed trials left out of n_stressed: exposure measured, window never opened."""
    tokens_per_s: float | None = None
    """Median tokens/s of the plain cell (else of any cell that has one)."""
    tokens_range: tuple[float, float] | None = None
    """Slowest and fastest trial of that same cell."""
    died_alone: list[str] = field(default_factory=list)
    """`run N: signature` per `dflash bench` of the strategy that died of an error alone on the
    GPU: a failure outside the matrix, which rules the strategy out as k > 0 does."""

    @property
    def clean(self) -> bool:
        return self.k == 0 and not self.died_alone

    def failures(self) -> str:
        """`k/n`, and the benches it died in."""
        benched = f" and died in a bench alone on the GPU ({'; '.join(self.died_alone)})" if self.died_alone else ""
        return f"{self.k}/{self.n}{benched}"


@dataclass(kw_only=True, slots=True)
class Verdict:
    workload: str
    chosen: list[StrategyTotals] = field(default_factory=list)
    """The recommendation (one strategy; several only when none has a throughput figure)."""
    short: list[StrategyTotals] = field(default_factory=list)
    """Clean so far, under MIN_STRESSED stressed trials."""
    failing: list[StrategyTotals] = field(default_factory=list)
    lock: StrategyTotals | None = None
    eager: StrategyTotals | None = None
    qualified: list[StrategyTotals] = field(default_factory=list)
    """Every qualifying strategy (clean, MIN_STRESSED stressed trials), `chosen` among them."""
    concurrent: StrategyTotals | None = None
    """The fastest qualifying strategy without the global lock."""
    serial: StrategyTotals | None = None
    """The fastest qualifying strategy with it (else the plain global-lock), what `concurrent`
    must beat by TARGET_OVER_LOCK."""

    def eager_qualifies(self, min_stressed: int = MIN_STRESSED) -> bool:
        e = self.eager
        return e is not None and e.clean and e.n_stressed >= min_stressed


def totals(cells: Sequence) -> dict[str, dict[str, StrategyTotals]]:
    """workload -> strategy -> totals over the strategy's cells (CellSummary-like objects)."""
    out: dict[str, dict[str, StrategyTotals]] = collections.defaultdict(dict)
    plain_tokens: dict[tuple[str, str], tuple] = {}
    any_tokens: dict[tuple[str, str], tuple] = {}
    for c in cells:
        t = out[c.workload].setdefault(c.strategy, StrategyTotals(strategy=c.strategy))
        t.k += c.k
        t.n += c.n
        if c.plan != NO_PLAN:
            # Duck-typed: summaries from before the probes (and tests' stand-ins) have no field.
            unexposed = getattr(c, "unexposed", 0)
            t.n_stressed += c.n - unexposed
            t.n_unexposed += unexposed
        if c.tokens_per_s is not None:
            figure = (c.tokens_per_s, getattr(c, "tokens_range", None))
            any_tokens.setdefault((c.workload, c.strategy), figure)
            if c.plan == NO_PLAN:
                plain_tokens[(c.workload, c.strategy)] = figure
    for w, by_strategy in out.items():
        for s, t in by_strategy.items():
            t.tokens_per_s, t.tokens_range = plain_tokens.get((w, s), any_tokens.get((w, s), (None, None)))
    return out


def recommend(cells: Sequence, *, min_stressed: int = MIN_STRESSED, bench_runs: Sequence = ()) -> list[Verdict]:
    """`bench_runs` (harness.analysis.bench_records.Bench): a strategy whose bench of the workload died of an error
    is failing, whatever its cells say (a cell clean at 29 stressed trials has died of F2 alone on
    the GPU). Pass only benches on as many GPUs as the workload's trials."""
    verdicts = []
    for workload, by_strategy in sorted(totals(cells).items()):
        for b in bench_runs:
            if b.preset == workload and b.failed and b.strategy in by_strategy:
                by_strategy[b.strategy].died_alone.append(f"run {b.host_run}: {b.signature}")
        # A catalogue entry whose only fix is the lock (r14-r18 in catalogue-cpu) tests the lock
        # itself: judged like any fix there, and not priced against itself.
        lock_is_fix = LOCK in by_strategy and all(s in BASELINES for s in by_strategy)
        if all(s in BASELINES for s in by_strategy) and not lock_is_fix:
            continue  # nothing but baselines: no fix was tried on this workload
        v = Verdict(
            workload=workload, lock=None if lock_is_fix else by_strategy.get(LOCK), eager=by_strategy.get(EAGER)
        )
        for s, t in sorted(by_strategy.items()):
            if (s in BASELINES and not (lock_is_fix and s == LOCK)) or t.n == 0:
                continue
            if not t.clean:
                v.failing.append(t)
            elif t.n_stressed < min_stressed:
                v.short.append(t)
            else:
                v.chosen.append(t)
        v.qualified = list(v.chosen)
        ranked = [t for t in v.chosen if t.tokens_per_s is not None]
        if ranked:
            v.chosen = [_fastest(ranked)]
            v.concurrent = _fastest([t for t in ranked if not serialised(t.strategy)])
            v.serial = _fastest([t for t in ranked if serialised(t.strategy)]) or v.lock
        verdicts.append(v)
    return verdicts


def _fastest(ts: Sequence[StrategyTotals]) -> StrategyTotals | None:
    return max(ts, key=lambda t: (t.tokens_per_s, t.strategy)) if ts else None


def _ratio(t: StrategyTotals, base: StrategyTotals | None, name: str) -> str:
    if base is None or not base.tokens_per_s or t.tokens_per_s is None:
        failed = f" ({name} failed {base.failures()})" if base is not None and not base.clean else ""
        return f"no {name} figure{failed}"
    clean = "" if base.clean else f", and {name} itself failed {base.failures()}"
    return f"{t.tokens_per_s / base.tokens_per_s:.2f}x {name} ({base.tokens_per_s:.0f} tokens/s{clean})"


def lines(verdicts: Sequence[Verdict], *, min_stressed: int = MIN_STRESSED, bench_runs: Sequence = ()) -> list[str]:
    """One line per verdict; `bench_runs` (harness.analysis.bench_records.Bench) add the recommended strategy's
    cost alone on the GPU, per run, where a bench of its workload ran it."""
    out = []
    for v in verdicts:
        if v.eager_qualifies(min_stressed) and (not v.chosen or _eager_faster(v, bench_runs)):
            out.append(_eager_line(v, min_stressed, bench_runs))
        elif v.chosen and v.chosen[0].tokens_per_s is not None:
            t = v.chosen[0]
            out.append(
                f"{v.workload}: recommend `{t.strategy}`: 0/{t.n} failures ({t.n_stressed} under "
                f"a fault plan{_unexposed(t)}), {t.tokens_per_s:.0f} tokens/s = {_ratio(t, v.lock, LOCK)}, "
                f"{_ratio(t, v.eager, EAGER)}. {_concurrency(v, min_stressed, bench_runs)}{_noisy(v)}"
                f"{_alone(v, bench_runs)}{_ruled_out_alone(v)}"
            )
        elif v.chosen:
            names = ", ".join(f"`{t.strategy}` (0/{t.n}, {t.n_stressed} stressed{_unexposed(t)})" for t in v.chosen)
            out.append(f"{v.workload}: clean with >= {min_stressed} stressed trials: {names}.")
        else:
            short = (
                ", ".join(f"`{t.strategy}` 0/{t.n} ({t.n_stressed} stressed{_unexposed(t)})" for t in v.short) or "none"
            )
            failing = ", ".join(f"`{t.strategy}` {t.failures()}" for t in v.failing) or "none"
            out.append(
                f"{v.workload}: no configuration qualifies (needs 0 failures and >= {min_stressed} "
                f"stressed trials); clean so far: {short}; failing: {failing}."
            )
    return out


def _unexposed(t: StrategyTotals) -> str:
    return f"; {t.n_unexposed} more whose window never opened, not counted" if t.n_unexposed else ""


def _benched(bench_runs: Sequence, workload: str) -> dict[int, dict[str, list]]:
    """GPU-host run (NO_RUN for none) -> strategy -> the workload's benches with figures
    (harness.analysis.bench_records.Bench), in file order."""
    by_run: dict[int, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for x in bench_runs:
        if x.preset == workload and x.tokens_steady:
            by_run[NO_RUN if x.host_run is None else x.host_run][x.strategy].append(x)
    return by_run


def _run_label(n: int) -> str:
    """`run N`; a bench outside the GPU-host runs (no run number) is `run ?`."""
    return f"run {'?' if n == NO_RUN else n}"


def _figure(benches: Sequence) -> float:
    """A run's figure for one strategy: the median of its benches. A run may bench one strategy
    several times (two in both orders, to separate order from speed; `harness price` once per
    round): not the last one."""
    return statistics.median(x.tokens_steady for x in benches)


def _over(a: Sequence, b: Sequence) -> tuple[float, int]:
    """Strategy a's tokens/s over b's within one run, and how many paired rounds that rests on (0:
    a ratio of the two medians). Where a `harness price` run benched both in rounds (the latest, if
    several did), the figure is the median of its per-round ratios, as `harness price` prints it:
    a bench drifting within the run moves both of a round alike, and one fast bench does not move
    the median (on the H200 one moved a ratio of medians to 1.07x where the rounds' said 1.19x)."""
    rounds_b = {(x.run, x.round): x.tokens_steady for x in b if x.round is not None}
    by_run: dict[str, list[float]] = collections.defaultdict(list)
    for x in a:
        if x.round is not None and (x.run, x.round) in rounds_b:
            by_run[x.run or ""].append(x.tokens_steady / rounds_b[(x.run, x.round)])
    if by_run:
        # Price runs are not pooled (another may have priced another `--set`): the latest one decides.
        ratios = by_run[max(by_run)]
        return statistics.median(ratios), len(ratios)
    return _figure(a) / _figure(b), 0


def _paired(rounds: int) -> str:
    return f", {rounds} paired rounds" if rounds else ""


def _speed(a: StrategyTotals, b: StrategyTotals, workload: str, bench_runs: Sequence) -> tuple[float, str] | None:
    """a's tokens/s over b's and where the figure comes from: the latest run that benched both
    alone on the GPU, else the campaign's cells; None without figures."""
    alone = _alone_ratio(a.strategy, b.strategy, workload, bench_runs)
    if alone is not None:
        return alone
    if a.tokens_per_s and b.tokens_per_s:
        return a.tokens_per_s / b.tokens_per_s, "campaign medians"
    return None


def _alone_ratio(a: str, b: str, workload: str, bench_runs: Sequence) -> tuple[float, str] | None:
    host_runs = _benched(bench_runs, workload)
    both = [n for n, here in host_runs.items() if a in here and b in here]
    if not both:
        return None
    here = host_runs[max(both)]
    ratio, rounds = _over(here[a], here[b])
    return ratio, f"alone on the GPU, {_run_label(max(both))}{_paired(rounds)}"


def _eager_faster(v: Verdict, bench_runs: Sequence) -> bool:
    r = _speed(v.eager, v.chosen[0], v.workload, bench_runs)
    return r is not None and r[0] > 1.0


def _eager_line(v: Verdict, min_stressed: int, bench_runs: Sequence) -> str:
    """Eager is the fastest clean cell: the verdict, then what each compiled candidate costs."""
    e = v.eager
    head = (
        f"{v.workload}: recommend `eager` (do not compile): 0/{e.n} failures ({e.n_stressed} under a "
        f"fault plan), the fastest clean cell"
    )
    if e.tokens_per_s is not None:
        head += f", {e.tokens_per_s:.0f} tokens/s in the matrix = {_ratio(e, v.lock, LOCK)}"
    host_runs = {n: here[EAGER] for n, here in _benched(bench_runs, v.workload).items() if EAGER in here}
    if host_runs:
        n = max(host_runs)
        xs = host_runs[n]
        busy = [x.gpu_busy_steady for x in xs if x.gpu_busy_steady is not None]
        busy_text = f", GPU busy {statistics.median(busy):.0%}" if busy else ""
        times = f" (median of {len(xs)} benches)" if len(xs) > 1 else ""
        head += f"; alone on the GPU ({_run_label(n)}, steady half) {_figure(xs):.0f} tokens/s{times}{busy_text}"
    rest = []
    for t in (*v.chosen, *v.short):
        r = _speed(t, e, v.workload, bench_runs)
        status = f"0/{t.n}" + ("" if t in v.chosen else f", {t.n_stressed} stressed")
        rest.append(f"`{t.strategy}` ({status}) {r[0]:.2f}x eager ({r[1]})" if r else f"`{t.strategy}` ({status})")
    if v.chosen:
        tail = f"; clean compiled configurations are slower: {', '.join(rest)}"
    else:
        failing = ", ".join(f"`{t.strategy}` {t.failures()}" for t in v.failing) or "none"
        tail = (
            f"; no compiled configuration qualifies (needs 0 failures and >= {min_stressed} stressed "
            f"trials): clean so far {', '.join(rest) or 'none'}; failing: {failing}"
        )
    return head + tail + "."


def _alone(v: Verdict, bench_runs: Sequence) -> str:
    """The recommended strategy alone on the GPU, per run that benched it: tokens/s (the median
    where the run benched it more than once), against that run's eager bench and each other
    clean serialised strategy it benched (the price of a lock when the plain `global-lock` cell
    itself fails), and the fastest concurrent strategy's bench against it.
    Benches are matched to a workload by name; the caller passes only those on as many GPUs as the
    workload's trials (harness.analysis.report.benches_for), so a topology verdict is not priced by one-GPU
    benches."""
    t = v.chosen[0]
    locks = {x.strategy for x in v.qualified if serialised(x.strategy) and x.strategy != t.strategy}
    if v.lock is not None and v.lock.clean:
        locks.add(v.lock.strategy)
    parts = []
    for n, here in sorted(_benched(bench_runs, v.workload).items()):
        if t.strategy not in here:
            continue
        mine = here[t.strategy]
        figures = [f"{_figure(mine):.0f} tokens/s" + (f" (median of {len(mine)} benches)" if len(mine) > 1 else "")]
        others = ([EAGER] if EAGER in here else []) + [s for s in sorted(locks) if s in here]
        # (text, ratio, paired rounds): "1.19x `lock`" over each other, "`c` 0.95x it" for the concurrent one.
        ratios = [
            (lambda r, s=s: f"{r:.2f}x " + ("eager" if s == EAGER else f"`{s}`"), *_over(mine, here[s])) for s in others
        ]
        if v.concurrent is not None and v.concurrent.strategy != t.strategy and v.concurrent.strategy in here:
            c = v.concurrent.strategy
            ratios.append((lambda r, c=c: f"`{c}` {r:.2f}x it", *_over(here[c], mine)))
        # Ratios over rounds of one `harness price` run are medians of paired ratios, not ratios
        # of the medians beside them: said once per run, or per ratio where a run has both kinds.
        counts = {rounds for _, _, rounds in ratios}
        once = len(counts) == 1 and 0 not in counts
        figures += [
            text(ratio) + (f" ({rounds} paired rounds)" if rounds and not once else "")
            for text, ratio, rounds in ratios
        ]
        how = f" (ratios: medians over {counts.pop()} paired rounds)" if once else ""
        parts.append(f"{_run_label(n)}{how}: {', '.join(figures)}")
    return f" Alone on the GPU (`dflash bench`, steady half): {'; '.join(parts)}." if parts else ""


def _ruled_out_alone(v: Verdict) -> str:
    """Strategies whose cells are clean but which died in a bench: a reader of the table sees 0/n."""
    out = [f"`{t.strategy}` (0/{t.n}; {'; '.join(t.died_alone)})" for t in v.failing if t.k == 0 and t.died_alone]
    return f" Clean in the matrix but died alone on the GPU, so not recommended: {', '.join(out)}." if out else ""


def _noisy(v: Verdict) -> str:
    """The priced cells whose trials spread over more than NOISY_SPREAD, with their ranges."""
    priced = {
        t.strategy: t
        for t in (*v.chosen[:1], v.lock, v.eager, v.concurrent, v.serial)
        if t is not None and t.tokens_range and t.tokens_range[0] > 0
    }
    noisy = [t for _, t in sorted(priced.items()) if t.tokens_range[1] / t.tokens_range[0] > NOISY_SPREAD]
    if not noisy:
        return ""
    ranges = ", ".join(f"`{t.strategy}` {t.tokens_range[0]:.0f}-{t.tokens_range[1]:.0f}" for t in noisy)
    return (
        f" Throughput spread over {NOISY_SPREAD}x between trials ({ranges} tokens/s): these ratios "
        f"are hints; price them alone on the machine (`python -m harness price`)."
    )


def _concurrency(v: Verdict, min_stressed: int, bench_runs: Sequence = ()) -> str:
    """Whether running the compiled calls concurrently is clean, and whether it pays: judged alone
    on the GPU where a run benched both (the campaign's medians move with the trials that shared
    the GPU: one pair on the H200 read 0.95x there and 1.07x alone), else by the medians."""
    c, base = v.concurrent, v.serial
    if c is None:
        return (
            f"No concurrent configuration qualifies (each failed or has under {min_stressed} "
            f"stressed trials): on this workload only serialised compiled calls are clean."
        )
    if base is None or not base.tokens_per_s:
        return f"Fastest clean concurrent configuration: `{c.strategy}`; no serialised figure to price it."
    ratio = c.tokens_per_s / base.tokens_per_s
    head = (
        f"Fastest clean concurrent configuration: `{c.strategy}` (0/{c.n}), {c.tokens_per_s:.0f} "
        f"tokens/s = {ratio:.2f}x `{base.strategy}`"
    )
    alone = _alone_ratio(c.strategy, base.strategy, v.workload, bench_runs) if c is not base else None
    if alone is not None:
        ratio = alone[0]
        head += f" (campaign medians), {ratio:.2f}x {alone[1]}"
    verdict = "meets" if ratio >= TARGET_OVER_LOCK else "misses"
    return f"{head}: {verdict} the {TARGET_OVER_LOCK}x target."
