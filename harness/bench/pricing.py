"""What a fix costs, measured alone on the machine: `python -m harness price`.

A campaign trial shares the GPU with other trials, so its tokens/s move with its neighbours; a
`dflash bench` runs one configuration alone. One bench per configuration is still not enough to
price a fix: on the H200 (torch 2.11) the same configuration benched 35,841 and 30,406 tokens/s
within one run and 44,455 / 38,242 in two others, as far apart as the two configurations it was
compared with. So the price is measured the way a drift is cancelled:

- R rounds; each round benches every configuration once, each in a fresh process
  (`python -m dflash bench --rounds 1`), one after another, nothing else on the machine.
- The order alternates, A B C then C B A (the ABBA design of crossover trials): a drift over the
  rounds (clocks, caches, a neighbour's load) weighs on every configuration alike.
- A configuration's cost is the per-round ratio of its steady tokens/s to the base
  configuration's (the first one named): the two ran minutes apart, so the ratio is paired. Its
  summary is the median over rounds and a distribution-free interval for that median
  (`harness.stats.median_interval`, the sign test's order statistics) with its coverage: 75% with
  3 rounds, 94% with 5, 97% with 6 (harness.analysis.prices).
- A bench that dies is a result, not a gap: its record carries the exit code and the failure's
  signature (harness.analysis.bench_records), and the command exits 1.

Records go to `--into` in harness.analysis.bench_records' format (phase `bench:WORKLOAD:FIXES:MODE`, the
GPU-host run's number, the round), so that `python -m harness report` tables them with the run's other benches
and harness.analysis.recommend prices by them. WORKLOAD is the preset without its `gpu-` prefix, as the
campaign names its workloads (harness.campaign.presets).

    python -m harness price --preset gpu-launch-bound --rounds 3 \\
        global-lock,cstash-tls-init,cublas-handle-init,stash-incref,stream-sync \\
        cstash-tls-init,graph-isolation,cudagraph-lock,cublas-handle-init,single-thread-autograd,stash-incref,stream-sync,nested-fx-fallback \\
        global-lock:default :none
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dflash import presets
from dflash.config import ConfigError, apply_overrides
from dflash.errors import DevicePlanError
from dflash.topology import topology as topology_sets
from harness.analysis.bench_records import BenchError, append, died_signature, strategy_of
from harness.analysis.prices import Price, Run, price_runs, rows
from harness.runtime.fixes import FixSet, parse_names

TIMEOUT_RC = 124
"""A run past --timeout-s gets `timeout`'s exit code, which harness.analysis.bench_records reads as timed out."""
STDERR_TAIL = 40
"""Lines of a died run's stderr kept for its signature (h200_run.sh's bench phase keeps as many)."""


class PriceError(ValueError):
    """Bad input: one line, exit 2, nothing run or written."""


@dataclass(frozen=True, slots=True)
class Config:
    fixes: str
    """Comma-separated fix names as `--set fixes=` takes them ('' for none)."""
    mode: str
    """compile.mode ('none' = eager)."""
    drafters: int | None = None
    """pipeline.num_drafter_threads for this configuration (None: the preset's)."""

    def phase(self, workload: str) -> str:
        at = f"@{self.drafters}" if self.drafters is not None else ""
        return f"bench:{workload}:{self.fixes}:{self.mode}{at}"

    def sets(self) -> list[str]:
        return [] if self.drafters is None else [f"pipeline.num_drafter_threads={self.drafters}"]

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
    host_run: int | None = None
    """The GPU-host run's number (`--run`), kept in each record's `call` field."""
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
    """`FIXES[:MODE][@N]`: `global-lock,stash-incref`, `global-lock:default`, `:none` (eager),
    `:none@1` (eager with one drafter thread: is the threading worth it at all?)."""
    text, at, n = text.partition("@")
    drafters = None
    if at:
        if not n.isdigit() or int(n) < 1:
            raise PriceError(f"drafter threads after @ must be a number >= 1, got {n!r}")
        drafters = int(n)
    fixes, _, mode = text.partition(":")
    return Config(fixes=fixes.replace("+", ","), mode=mode or default_mode, drafters=drafters)


def make_plan(
    preset: str,
    configs: Sequence[str],
    *,
    rounds: int,
    steps: int,
    sets: Sequence[str] = (),
    timeout_s: float = 600.0,
    host_run: int | None = None,
    topology: int | None = None,
    cuda_count: int | None = None,
) -> Plan:
    """Validated in-process, as `dflash bench` would read it, so that a typo is one line and exit 2
    before the first bench starts rather than a died bench minutes later. That includes the device
    plan on this machine (`cuda_count` stands in for its GPU count in tests): a GPU preset or
    `--topology` on a machine without CUDA used to die in every bench, each recorded as a failure.
    `topology` N runs every bench in the seed trainer's device plan on N GPUs
    (dflash.topology: N >= 4; the paired plan below 4), as the gpu-topology matrices' trials run."""
    # dflash.devices imports torch, which the harness process otherwise never loads.
    from dflash.devices import resolve

    if topology is not None:
        try:
            sets = [*topology_sets(topology), *sets]
        except DevicePlanError as e:
            raise PriceError(str(e)) from None
    if rounds < 1 or steps < 1:
        raise PriceError(f"--rounds and --steps must be >= 1, got {rounds} and {steps}")
    if not configs:
        raise PriceError("name at least one configuration (FIXES[:MODE])")
    try:
        base = presets.get(preset)
        parsed = [parse_config(c, base.compile.mode) for c in configs]
        for c in parsed:
            cfg = apply_overrides(base, [*sets, f"fixes={c.fixes}", f"compile.mode={c.mode}", *c.sets()])
            # `recommended` resolves per machine in the bench itself; validate its extra names here.
            names, _ = parse_names(cfg.fixes)
            FixSet.from_names(names)
            resolve(
                cfg.devices,
                num_target_threads=cfg.pipeline.num_target_threads,
                num_drafter_threads=cfg.pipeline.num_drafter_threads,
                cuda_count=cuda_count,
            )
    except (ConfigError, DevicePlanError) as e:
        raise PriceError(str(e)) from None
    if len(set(parsed)) != len(parsed):
        raise PriceError(f"a configuration is named twice: {' '.join(configs)}")
    return Plan(
        preset=preset,
        configs=parsed,
        rounds=rounds,
        steps=steps,
        sets=list(sets),
        timeout_s=timeout_s,
        host_run=host_run,
        run_id=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def bench_once(plan: Plan, config: Config) -> dict:
    """One `dflash bench` in a fresh process: its JSON record, or {exit_code, signature} if it died."""
    argv = [
        sys.executable,
        "-m",
        "dflash",
        "bench",
        "--preset",
        plan.preset,
        "--steps",
        str(plan.steps),
        "--rounds",
        "1",
        "--set",
        f"fixes={config.fixes}",
        "--set",
        f"compile.mode={config.mode}",
    ]
    for kv in (*plan.sets, *config.sets()):
        argv += ["--set", kv]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=plan.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"event": "bench", "exit_code": TIMEOUT_RC, "signature": died_signature([], TIMEOUT_RC)}
    record = next(
        (json.loads(line) for line in reversed(done.stdout.splitlines()) if line.startswith('{"event": "bench"')), None
    )
    if done.returncode == 0 and record is not None:
        return record
    rc = done.returncode or 1
    tail = done.stderr.splitlines()[-STDERR_TAIL:]
    return {"event": "bench", "exit_code": rc, "signature": died_signature(tail, rc)}


def run(
    plan: Plan,
    *,
    bench: Callable[[Plan, Config], dict] | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    done: Callable[[dict], None] = lambda record: None,
    records: list[dict] | None = None,
) -> list[dict]:
    """Every bench of the plan in order; `done` gets each record as it is made (saved at once: a
    run whose time runs out keeps the rounds it finished), `records` collects them."""
    records = [] if records is None else records
    bench = bench or bench_once
    steps = plan.order()
    for i, (r, c) in enumerate(steps, 1):
        t0 = time.monotonic()
        got = bench(plan, c)
        record = {
            "phase": c.phase(plan.workload),
            "call": plan.host_run,
            "run": plan.run_id,
            "round": r,
            **({"sets": plan.sets} if plan.sets else {}),
            **got,
        }
        records.append(record)
        done(record)
        what = (
            f"{record['tokens_per_s_steady']:.0f} tokens/s (steady half)"
            if record.get("tokens_per_s_steady")
            else f"died: exit {record.get('exit_code')}: {record.get('signature')}"
        )
        log(f"[{i}/{len(steps)}] round {r} `{c.strategy(plan.workload)}`: {what} ({time.monotonic() - t0:.0f}s)")
    return records


def prices(plan: Plan, records: Sequence[dict]) -> list[Price]:
    runs = [
        Run(
            strategy=strategy_of(d["phase"])[1],
            round=d["round"],
            tokens=d.get("tokens_per_s_steady"),
            died=d.get("signature") if d.get("exit_code") else None,
            gpu_busy=d.get("gpu_busy_steady"),
        )
        for d in records
    ]
    return price_runs(runs, [c.strategy(plan.workload) for c in plan.configs])


def table(plan: Plan, ps: Sequence[Price], target: float | None = None) -> str:
    head = (
        f"{plan.preset}: {plan.rounds} round(s) of {len(ps)} configuration(s), {plan.steps} steps each, "
        f"alternating order; ratio = per-round tokens/s over `{ps[0].strategy}`, median and its interval"
    )
    return "\n".join([head, "", *rows(ps, target)])


def save(records: Sequence[dict], into: Path) -> None:
    """Append to a bench file, whole-file atomic: a file that is not one (harness.analysis.bench_records)
    fails first."""
    try:
        append(into, records)
    except BenchError as e:
        raise PriceError(str(e)) from None
