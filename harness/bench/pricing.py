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
  signature (harness.analysis.bench_records), and the command exits 1. A bench past `--timeout-s`
  is dumped (every thread, py-spy) before it is killed: a stall is data, and on the H200 a raw
  gpu-default bench ran 548 s without a figure and without a word on why.
- `--max-time S` bounds the whole run: a bench starts only if the benches of its configuration so
  far fit in what is left, and none runs past it (one cut short is not recorded). `--resume` picks
  the file's last run up where it stopped, same run and rounds: a run longer than one sitting on
  a GPU host is two commands.

Records go to `--into` in harness.analysis.bench_records' format (phase `bench:WORKLOAD:FIXES:MODE`, the
GPU-host run's number, the round), so that `python -m harness report` tables them with the run's other benches
and harness.analysis.verdicts prices by them. WORKLOAD is the preset without its `gpu-` prefix, as the
campaign names its workloads (harness.campaign.matrix.presets).

    python -m harness price --preset gpu-launch-bound --rounds 3 \\
        global-lock,cstash-tls-init,cublas-handle-init,stash-incref,stream-sync \\
        cstash-tls-init,graph-isolation,cudagraph-lock,cublas-handle-init,single-thread-autograd,stash-incref,stream-sync,nested-fx-fallback \\
        global-lock:default :none
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dflash import presets
from dflash.config import ConfigError, apply_overrides
from dflash.topology import topology as topology_sets
from dflash.trainer_errors import DevicePlanError
from harness.analysis.bench_records import BenchError, append, died, died_signature, strategy_of, timed_out
from harness.analysis.prices import Price, Run, price_runs, rows
from harness.runtime.errors import UserInputError
from harness.runtime.fixes import FixSet, check_cuda_graphs, parse_names
from harness.trial import hangs
from harness.trial.interpreter import installed_torch

TIMEOUT_RC = 124
"""A run past --timeout-s gets `timeout`'s exit code, which harness.analysis.bench_records reads as timed out."""
STDERR_TAIL = 40
"""Lines of a died run's stderr kept for its signature (h200_run.sh's bench phase keeps as many)."""


class PriceError(UserInputError):
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
    max_time_s: float | None = None
    """Start no bench that would not end within this many seconds of the run's start (`--max-time`)."""
    dumps: Path | None = None
    """Where a bench past its timeout is dumped before it is killed (one folder per bench)."""

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
    max_time_s: float | None = None,
    dumps: Path | None = None,
) -> Plan:
    """Validated in-process, as `dflash bench` would read it, so that a typo is one line and exit 2
    before the first bench starts rather than a died bench minutes later. That includes the device
    plan on this machine (`cuda_count` stands in for its GPU count in tests): a GPU preset or
    `--topology` on a machine without CUDA used to die in every bench, each recorded as a failure.
    `topology` N runs every bench in the seed trainer's device plan on N GPUs
    (dflash.topology: N >= 4; the paired plan below 4), as the gpu-topology matrices' trials run."""
    if topology is not None:
        try:
            sets = [*topology_sets(topology), *sets]
        except DevicePlanError as e:
            raise PriceError(str(e)) from None
    if rounds < 1 or steps < 1:
        raise PriceError(f"--rounds and --steps must be >= 1, got {rounds} and {steps}")
    if not configs:
        raise PriceError("name at least one configuration (FIXES[:MODE])")
    parsed = _checked_configs(preset, configs, sets, cuda_count)
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
        max_time_s=max_time_s,
        dumps=dumps,
        run_id=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def _checked_configs(preset: str, configs: Sequence[str], sets: Sequence[str], cuda_count: int | None) -> list[Config]:
    """The configurations parsed, each applied to the preset and its device plan resolved as the
    bench will, so that a bad name or plan is a PriceError now."""
    # dflash.devices imports torch, which the harness process otherwise never loads.
    from dflash.devices import resolve

    try:
        base = presets.get(preset)
        parsed = [parse_config(c, base.compile.mode) for c in configs]
        for c in parsed:
            cfg = apply_overrides(base, [*sets, f"fixes={c.fixes}", f"compile.mode={c.mode}", *c.sets()])
            # `recommended` resolves per machine in the bench itself; validate its extra names here.
            names, _ = parse_names(cfg.fixes)
            FixSet.from_names(names)
            plan = resolve(
                cfg.devices,
                num_target_threads=cfg.pipeline.num_target_threads,
                num_drafter_threads=cfg.pipeline.num_drafter_threads,
                cuda_count=cuda_count,
            )
            check_cuda_graphs(names, cfg.compile.cudagraphs and any(d.type == "cuda" for d in plan.drafter))
    except (ConfigError, DevicePlanError) as e:
        raise PriceError(str(e)) from None
    return parsed


def bench_once(plan: Plan, config: Config, limit_s: float, dump_dir: Path | None) -> dict:
    """One `dflash bench` in a fresh process, at most `limit_s` seconds: its JSON record, or
    {exit_code, signature} if it died. Past `plan.timeout_s` it is a stall: dumped into `dump_dir`
    first, then killed with its process group (the compile workers with it). Stopped earlier by
    the run's `--max-time`, it is {"cut": True}: no figure and no failure."""
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
    with tempfile.TemporaryDirectory(prefix="price-bench-") as tmp:
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                return _stopped(proc, stalled=limit_s >= plan.timeout_s, dump_dir=dump_dir, err_path=err_path)
            except BaseException:
                _kill(proc)  # SIGTERM from a time limit: no bench outlives the run
                raise
        stdout = out_path.read_text(encoding="utf-8", errors="replace")
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
    record = next(
        (json.loads(line) for line in reversed(stdout.splitlines()) if line.startswith('{"event": "bench"')), None
    )
    if rc == 0 and record is not None:
        return record
    rc = rc or 1
    tail = stderr.splitlines()[-STDERR_TAIL:]
    return {"event": "bench", "exit_code": rc, "signature": died_signature(tail, rc)}


def _kill(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _stopped(proc: subprocess.Popen, *, stalled: bool, dump_dir: Path | None, err_path: Path) -> dict:
    if not stalled:
        _kill(proc)
        return {"event": "bench", "cut": True}
    if dump_dir is None:
        dump_dir = Path(tempfile.mkdtemp(prefix="price-dump-"))
    dump_dir.mkdir(parents=True, exist_ok=True)
    # The torch line lets `harness diagnose` judge the dump on the torch the bench ran on.
    dumped = hangs.dump(
        proc.pid, dump_dir, output_path=str(err_path), note=f"torch {installed_torch() or '?'}, a bench past its limit"
    )
    _kill(proc)
    record = {"event": "bench", "exit_code": TIMEOUT_RC, "signature": died_signature([], TIMEOUT_RC)}
    if dumped.text_path:
        record["dump"] = dumped.text_path
        record["dump_method"] = dumped.method
    return record


def _slug(round_: int, config: Config) -> str:
    name = f"{config.fixes or 'raw'}-{config.mode}" + (f"-{config.drafters}" if config.drafters else "")
    return f"r{round_}-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


def run(
    plan: Plan,
    *,
    bench: Callable[[Plan, Config, float, Path | None], dict] | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    done: Callable[[dict], None] = lambda record: None,
    records: list[dict] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[dict]:
    """Every bench of the plan in order; `done` gets each record as it is made (saved at once: a
    run whose time runs out keeps the rounds it finished), `records` collects them. Records
    already in `records` (a resumed run's) are benches not run again."""
    records = [] if records is None else records
    bench = bench or bench_once
    had = {(d["round"], d["phase"]) for d in records}
    walls: dict[str, list[float]] = {}
    for d in records:
        if d.get("wall_s"):
            walls.setdefault(d["phase"], []).append(d["wall_s"])
    start = clock()
    steps = plan.order()
    left_over = 0
    for i, (r, c) in enumerate(steps, 1):
        phase = c.phase(plan.workload)
        if (r, phase) in had:
            continue
        limit = _limit(plan, walls.get(phase) or [w for ws in walls.values() for w in ws], start, clock)
        if limit is None:
            left_over = len(steps) - i + 1
            break
        t0 = clock()
        got = bench(plan, c, limit, plan.dumps / _slug(r, c) if plan.dumps is not None else None)
        wall = round(clock() - t0, 1)
        head = f"[{i}/{len(steps)}] round {r} `{c.strategy(plan.workload)}`"
        if got.get("cut"):
            left_over = len(steps) - i + 1
            log(f"{head}: cut by --max-time after {wall:.0f}s")
            break
        record = _record(plan, r, phase, got, wall)
        records.append(record)
        done(record)
        walls.setdefault(phase, []).append(wall)
        log(f"{head}: {_result_text(record, got.get('dump'))} ({wall:.0f}s)")
    if left_over:
        log(
            f"stopped at --max-time with {left_over} bench(es) of {len(steps)} left: the same command with --resume runs them"
        )
    return records


def _limit(plan: Plan, expect: Sequence[float], start: float, clock: Callable[[], float]) -> float | None:
    """The next bench's time limit; None where --max-time leaves too little for it (the median of
    its earlier walls, or of every bench's)."""
    if plan.max_time_s is None:
        return plan.timeout_s
    left = plan.max_time_s - (clock() - start)
    if left <= 0 or (expect and statistics.median(expect) > left):
        return None
    return min(plan.timeout_s, left)


def _record(plan: Plan, round_: int, phase: str, got: dict, wall: float) -> dict:
    record = {
        "phase": phase,
        "call": plan.host_run,
        "run": plan.run_id,
        "round": round_,
        **({"sets": plan.sets} if plan.sets else {}),
        **got,
        "wall_s": wall,
    }
    shown = record.get("dump")
    if shown and plan.dumps is not None and Path(shown).is_relative_to(plan.dumps.parent):
        # Kept relative to the bench file's folder: a GPU host's $OUT is not where it is read.
        record["dump"] = str(Path(shown).relative_to(plan.dumps.parent))
    return record


def _result_text(record: dict, dump: str | None) -> str:
    what = (
        f"{record['tokens_per_s_steady']:.0f} tokens/s (steady half)"
        if record.get("tokens_per_s_steady")
        else f"died: exit {record.get('exit_code')}: {record.get('signature')}"
    )
    if dump:
        what += f"; threads dumped before the kill: python -m harness diagnose {dump}"
    return what


def resumed(plan: Plan, held: Sequence[dict]) -> list[dict]:
    """The records of the last run in a bench file, checked to be this plan's: `plan` takes its run id,
    and run() benches only what they lack. Another plan's run is a PriceError (one line, exit 2)."""
    if not held:
        raise PriceError("--resume: the file has no run to resume")
    run_id = held[-1].get("run")
    mine = [d for d in held if d.get("run") == run_id]
    phases = {c.phase(plan.workload) for c in plan.configs}
    other = sorted({d["phase"] for d in mine} - phases)
    if (
        other
        or any(list(d.get("sets") or []) != plan.sets for d in mine)
        or any(d["round"] >= plan.rounds for d in mine)
    ):
        what = ", ".join(other) if other else "other --set overrides or more rounds"
        raise PriceError(f"--resume: the last run in the file ({run_id}) priced something else: {what}")
    plan.run_id = run_id
    return mine


def prices(plan: Plan, records: Sequence[dict]) -> list[Price]:
    runs = [
        Run(
            strategy=strategy_of(d["phase"])[1],
            round=d["round"],
            tokens=d.get("tokens_per_s_steady"),
            died=d.get("signature") if died(d.get("exit_code")) else None,
            gpu_busy=d.get("gpu_busy_steady"),
            timed_out=timed_out(d.get("exit_code")),
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
