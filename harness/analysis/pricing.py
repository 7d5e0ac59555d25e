"""What a fix costs, measured alone on the machine: `python -m harness price`.

A campaign trial shares the GPU with other trials, so its tokens/s move with its neighbours; a
`dflash bench` runs one configuration alone. One bench per configuration is still not enough to
price a fix: on the H200 the same configuration benched 35,841 and 30,406 tokens/s within one call
and 44,455 / 38,242 in two others (REPORT.md, tenth and eleventh sessions), as far apart as the
two configurations it was compared with. So the price is measured the way a drift is cancelled:

- R rounds; each round benches every configuration once, each in a fresh process
  (`python -m dflash bench --rounds 1`), one after another, nothing else on the machine.
- The order alternates, A B C then C B A (the ABBA design of crossover trials): a drift over the
  session (clocks, caches, a neighbour's load) weighs on every configuration alike.
- A configuration's cost is the per-round ratio of its steady tokens/s to the base
  configuration's (the first one named): the two ran minutes apart, so the ratio is paired. Its
  summary is the median over rounds and a distribution-free interval for that median
  (`harness.stats.median_interval`, the sign test's order statistics) with its coverage: 75% with
  3 rounds, 94% with 5, 97% with 6.
- A bench that dies is a result, not a gap: its record carries the exit code and the failure's
  signature (harness.analysis.benches), and the command exits 1.

Records go to `--into` in harness.analysis.benches' format (phase `bench:WORKLOAD:FIXES:MODE`, the call
number, the round), so that `python -m harness report` tables them with the call's other benches
and harness.analysis.recommend prices by them. WORKLOAD is the preset without its `gpu-` prefix, as the
campaign names its workloads (harness.campaign.presets).

    python -m harness price --preset gpu-launch-bound --rounds 3 \\
        global-lock,cstash-tls-init,cublas-handle-init,stash-incref,stream-sync \\
        cstash-tls-init,graph-isolation,cudagraph-lock,cublas-handle-init,single-thread-autograd,stash-incref,stream-sync,nested-fx-fallback \\
        global-lock:default :none
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.analysis.benches import BenchError, append, died_signature, strategy_of

TIMEOUT_RC = 124
"""A run past --timeout-s gets `timeout`'s exit code, which harness.analysis.benches reads as timed out."""
STDERR_TAIL = 40
"""Lines of a died run's stderr kept for its signature (call.sh's bench phase keeps as many)."""


class PriceError(ValueError):
    """Bad input: one line, exit 2, nothing run or written."""


@dataclass(frozen=True, slots=True)
class Config:
    fixes: str
    """Comma-separated fix names as `--set fixes=` takes them ('' for none)."""
    mode: str
    """compile.mode ('none' = eager)."""

    def phase(self, workload: str) -> str:
        return f"bench:{workload}:{self.fixes}:{self.mode}"

    def strategy(self, workload: str) -> str:
        return strategy_of(self.phase(workload))[1]


@dataclass(kw_only=True, slots=True)
class Plan:
    preset: str
    configs: list[Config]
    rounds: int
    steps: int
    sets: list[str] = field(default_factory=list)
    timeout_s: float = 600.0
    call: int | None = None
    run_id: str = ""
    """When the run started (UTC): its rounds pair only with each other, in a file that holds
    several runs (harness.analysis.benches groups by it)."""

    @property
    def workload(self) -> str:
        return self.preset.removeprefix("gpu-")

    def order(self) -> list[tuple[int, Config]]:
        """(round, config) in run order: forward in even rounds, reversed in odd ones."""
        out = []
        for r in range(self.rounds):
            configs = self.configs if r % 2 == 0 else self.configs[::-1]
            out += [(r, c) for c in configs]
        return out


def parse_config(text: str, default_mode: str) -> Config:
    """`FIXES[:MODE]`: `global-lock,stash-incref`, `global-lock:default`, `:none` (eager)."""
    fixes, _, mode = text.partition(":")
    return Config(fixes=fixes.replace("+", ","), mode=mode or default_mode)


def make_plan(preset: str, configs: Sequence[str], *, rounds: int, steps: int, sets: Sequence[str] = (),
              timeout_s: float = 600.0, call: int | None = None, topology: int | None = None,
              cuda_count: int | None = None) -> Plan:
    """Validated in-process, as `dflash bench` would read it, so that a typo is one line and exit 2
    before the first bench starts rather than a died bench minutes later. That includes the device
    plan on this machine (`cuda_count` stands in for its GPU count in tests): a GPU preset or
    `--topology` on a machine without CUDA used to die in every bench, each recorded as a failure.
    `topology` N runs every bench in the seed trainer's device plan on N GPUs
    (harness.campaign.presets.topology_sets, N >= 4; the paired plan below 4), as the gpu-topology
    matrices' trials run (issue 6)."""
    from dflash import presets
    from dflash.config import ConfigError, apply_overrides
    from dflash.devices import DevicePlanError, resolve
    from dflash.fixes import FixSet, parse_names
    from harness.campaign.matrix import MatrixError
    from harness.campaign.presets import paired_topology_sets, topology_sets

    if topology is not None:
        try:
            sets = [*(topology_sets(topology) if topology >= 4 else paired_topology_sets(topology)), *sets]
        except MatrixError as e:
            raise PriceError(str(e)) from None
    if rounds < 1 or steps < 1:
        raise PriceError(f"--rounds and --steps must be >= 1, got {rounds} and {steps}")
    if not configs:
        raise PriceError("name at least one configuration (FIXES[:MODE])")
    try:
        base = presets.get(preset)
        parsed = [parse_config(c, base.compile.mode) for c in configs]
        for c in parsed:
            cfg = apply_overrides(base, [*sets, f"fixes={c.fixes}", f"compile.mode={c.mode}"])
            # `recommended` resolves per machine in the bench itself; validate its extra names here.
            names, _ = parse_names(cfg.fixes)
            FixSet.from_names(names)
            resolve(cfg.devices, num_target_threads=cfg.pipeline.num_target_threads,
                    num_drafter_threads=cfg.pipeline.num_drafter_threads, cuda_count=cuda_count)
    except (ConfigError, DevicePlanError) as e:
        raise PriceError(str(e)) from None
    if len(set(parsed)) != len(parsed):
        raise PriceError(f"a configuration is named twice: {' '.join(configs)}")
    return Plan(preset=preset, configs=parsed, rounds=rounds, steps=steps, sets=list(sets),
                timeout_s=timeout_s, call=call,
                run_id=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def bench_once(plan: Plan, config: Config) -> dict:
    """One `dflash bench` in a fresh process: its JSON record, or {exit_code, signature} if it died."""
    argv = [sys.executable, "-m", "dflash", "bench", "--preset", plan.preset, "--steps", str(plan.steps),
            "--rounds", "1", "--set", f"fixes={config.fixes}", "--set", f"compile.mode={config.mode}"]
    for kv in plan.sets:
        argv += ["--set", kv]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=plan.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"event": "bench", "exit_code": TIMEOUT_RC, "signature": died_signature([], TIMEOUT_RC)}
    record = next((json.loads(line) for line in reversed(done.stdout.splitlines())
                   if line.startswith('{"event": "bench"')), None)
    if done.returncode == 0 and record is not None:
        return record
    rc = done.returncode or 1
    tail = done.stderr.splitlines()[-STDERR_TAIL:]
    return {"event": "bench", "exit_code": rc, "signature": died_signature(tail, rc)}


def run(plan: Plan, *, bench: Callable[[Plan, Config], dict] | None = None,
        log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
        done: Callable[[dict], None] = lambda record: None, records: list[dict] | None = None) -> list[dict]:
    """Every bench of the plan in order; `done` gets each record as it is made (saved at once: a
    call whose time runs out keeps the rounds it finished), `records` collects them."""
    records = [] if records is None else records
    bench = bench or bench_once
    steps = plan.order()
    for i, (r, c) in enumerate(steps, 1):
        t0 = time.monotonic()
        got = bench(plan, c)
        record = {"phase": c.phase(plan.workload), "call": plan.call, "run": plan.run_id, "round": r,
                  **({"sets": plan.sets} if plan.sets else {}), **got}
        records.append(record)
        done(record)
        what = (f"{record['tokens_per_s_steady']:.0f} tokens/s (steady half)" if record.get("tokens_per_s_steady")
                else f"died: exit {record.get('exit_code')}: {record.get('signature')}")
        log(f"[{i}/{len(steps)}] round {r} `{c.strategy(plan.workload)}`: {what} ({time.monotonic() - t0:.0f}s)")
    return records


@dataclass(kw_only=True, slots=True)
class Price:
    strategy: str
    tokens: list[float]
    died: list[str]
    ratio: stats.MedianInterval | None
    """Per-round tokens/s over the base configuration's, summarised; None for the base itself or
    without a round where both ran."""
    by_round: dict[int, float] = field(default_factory=dict)
    """Round -> tokens/s of the benches that ran to a figure: what `pairwise` pairs."""
    gpu_busy: list[float] = field(default_factory=list)
    """Steady-half GPU busy fractions of its benches that have one."""


@dataclass(frozen=True, slots=True)
class Run:
    """One bench of a round, as prices() reads it (from this command's records or harness.analysis.benches')."""
    strategy: str
    round: int
    tokens: float | None
    died: str | None = None
    gpu_busy: float | None = None
    """The GPU's busy fraction over the bench's steady half (None on CPU): issue 5 prices a
    configuration by its tokens/s and by how busy it keeps the GPU."""


def prices(plan: Plan, records: Sequence[dict]) -> list[Price]:
    runs = [Run(strategy=strategy_of(d["phase"])[1], round=d["round"], tokens=d.get("tokens_per_s_steady"),
                died=d.get("signature") if d.get("exit_code") else None, gpu_busy=d.get("gpu_busy_steady"))
            for d in records]
    return price_runs(runs, [c.strategy(plan.workload) for c in plan.configs])


def paired_ratios(row: Price, col: Price) -> list[float]:
    """Row's tokens/s over column's in each round where both ran to a figure, in round order: the
    one pairing of the base column, the grid and the plots."""
    return [t / col.by_round[r] for r, t in sorted(row.by_round.items()) if r in col.by_round]


def price_runs(runs: Sequence[Run], order: Sequence[str]) -> list[Price]:
    """Per configuration of `order` (the first is the base): its figures, its died benches, and the
    median of its per-round ratios to the base with the median's interval."""
    out = []
    for name in order:
        mine = [x for x in runs if x.strategy == name]
        out.append(Price(strategy=name, tokens=[x.tokens for x in mine if x.tokens],
                         died=[f"round {x.round}: {x.died}" for x in mine if x.died is not None],
                         ratio=None, by_round={x.round: x.tokens for x in mine if x.tokens},
                         gpu_busy=[x.gpu_busy for x in mine if x.tokens and x.gpu_busy is not None]))
    for p in out[1:]:
        p.ratio = stats.median_interval(paired_ratios(p, out[0]))
    return out


def pairwise(ps: Sequence[Price]) -> list[str]:
    """With three configurations or more, every one over every other, paired by round as the base
    column is: a run prices the lock-free configuration against the lock and the lock against the
    no-cudagraphs lock at once (REPORT.md, twelfth session: call 35's lock-free configuration ran
    1.13x the no-cudagraphs lock in each of its three rounds, a figure the base column does not
    show). Row over column; the median of the per-round ratios and its interval."""
    if len(ps) < 3:
        return []
    letters = [chr(ord("A") + i) for i in range(len(ps))]
    grid = [[stats.median_interval(paired_ratios(row, col)) if row is not col else None for col in ps] for row in ps]
    coverages = collections.Counter(m.coverage for ms in grid for m in ms if m is not None)
    usual = coverages.most_common(1)[0][0] if coverages else None
    lines = ["", "Every configuration over every other (row over column, per round: the median and its "
             f"interval{f', coverage {usual:.0%}' if usual is not None else ''}):",
             "", "| | " + " | ".join(letters) + " |", "|---|" + "---|" * len(ps)]
    for letter, row, ms in zip(letters, ps, grid):
        # A pair with fewer rounds (a died bench) has a weaker interval: its coverage is said.
        cells = [("-" if row is col else "no shared round") if m is None else f"{m.median:.2f}x ({m.low:.2f}-{m.high:.2f}"
                 + (f", {m.coverage:.0%}" if m.coverage != usual else "") + ")" for m, col in zip(ms, ps)]
        lines.append(f"| {letter} `{row.strategy}` | " + " | ".join(cells) + " |")
    return lines


def table(plan: Plan, ps: Sequence[Price], target: float | None = None) -> str:
    head = (f"{plan.preset}: {plan.rounds} round(s) of {len(ps)} configuration(s), {plan.steps} steps each, "
            f"alternating order; ratio = per-round tokens/s over `{ps[0].strategy}`, median and its interval")
    return "\n".join([head, "", *rows(ps, target)])


def rows(ps: Sequence[Price], target: float | None = None) -> list[str]:
    """The markdown table of prices (and the died benches, and the target's verdicts)."""
    base = ps[0].strategy
    busy = any(p.gpu_busy for p in ps)     # a GPU run: its busy fraction is part of the price
    lines = ["| configuration | ran | median tok/s | range | vs base (median) | interval | coverage |"
             + (" GPU busy |" if busy else ""), "|---|---|---|---|---|---|---|" + ("---|" if busy else "")]
    for p in ps:
        med = f"{statistics.median(p.tokens):.0f}" if p.tokens else "-"
        rng = f"{min(p.tokens):.0f}-{max(p.tokens):.0f}" if p.tokens else "-"
        ran = f"{len(p.tokens)}/{len(p.tokens) + len(p.died)}"
        if p.ratio is None:
            vs, iv, cov = ("1.00x (base)", "-", "-") if p.strategy == base else ("-", "-", "-")
        else:
            vs, iv, cov = f"{p.ratio.median:.2f}x", f"{p.ratio.low:.2f}x-{p.ratio.high:.2f}x", f"{p.ratio.coverage:.0%}"
        gpu = (f" {statistics.median(p.gpu_busy):.0%} |" if p.gpu_busy else " - |") if busy else ""
        lines.append(f"| `{p.strategy}` | {ran} | {med} | {rng} | {vs} | {iv} | {cov} |{gpu}")
    for p in ps:
        lines += [f"- `{p.strategy}` died alone: {d}" for d in p.died]
    lines += pairwise(ps)
    if target is not None:
        lines.append("")
        for p in ps[1:]:
            if p.ratio is not None:
                lines.append(f"- `{p.strategy}` against {target}x `{base}`: {verdict(p.ratio, target)}")
    return lines


def verdict(ratio: stats.MedianInterval, target: float) -> str:
    """Whether the interval clears the target: `meets` only when its low end does."""
    how = f"interval {ratio.low:.2f}x-{ratio.high:.2f}x ({ratio.coverage:.0%})"
    if ratio.low >= target:
        return f"meets ({how})"
    if ratio.high < target:
        return f"misses ({how})"
    return f"undecided ({how}): more rounds"


def save(records: Sequence[dict], into: Path) -> None:
    """Append to a bench file, whole-file atomic: a file that is not harness.analysis.benches' fails first."""
    try:
        append(into, records)
    except BenchError as e:
        raise PriceError(str(e)) from None


