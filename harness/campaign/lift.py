"""Lift benchmark: per-trial reproduction probability of races, plain vs under scheduler plans.

`python -m harness lift [--trials N] [--workers W] [--targets F2,R5,F3] [--profiles ...]`.
CPU targets F2, R5, F3; GPU targets (a CUDA host) capture-r05, capture-r23 and G2, the catalogue
repros whose plain rate leaves room for a lift (r05 3/10, r23 7/10, r20 5/10 on the H200,
results/gpu-repros; r01, r02, r04 fail 10/10 plain, so no plan can lift them).
Every trial is a fresh process run by harness.trial.runner.run_trial and kept in a result store
(`<out>/trials.jsonl` + `artefacts/`, so `harness replay ID --store OUT` reruns one; a rerun into
the same folder resumes). Configurations are interleaved trial by trial (plain, plan A, plan B,
plain, ...) so that load from other processes on the machine drifts over all of them alike. A trial
counts as reproduced by the target's own rule (F2: its RuntimeError text in the output; R5: the
process died of a fatal signal; F3: the repro's CURRENT_PATCHER line). Rates are k/n with Wilson
95% intervals (harness.stats); lift = p(plan) / p(plain), the conservative lift = low(plan) /
high(plain) from the interval ends; ttff is the median serial wall time to the first reproducing
trial (harness.stats.median_time_to_first_failure: start-up included).

The pct profiles (harness.faults.pct) need k, the point hits of a plain run of the workload:
before the cells, `--calibrate N` counting runs per target (profile `pct-count`) measure k and n
(harness.campaign.calibration), every pct trial's plan carries that k, and the table prints PCT's
bound 1/(n k^(d-1)) beside the measured rate.

For comparison, hand-made pressure before the harness (torch 2.13 CPU, a 1e-6 switch interval):
F2 1/10 plain vs 10/10; R5 1/20 plain vs 10/10.

`--replays M` reruns the first reproducing F2 trial's exact plan M times and counts how many give
the same signature and the same decision sequence: measured, never assumed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.campaign import calibration
from harness.campaign.calibration import Calibration
from harness.faults import pct
from harness.faults.profiles import plan_from_seed
from harness.faults.scheduler import decisions
from harness.stores.store import Store
from harness.trial.folder import OUTPUT, PLAN_LOG, SPEC
from harness.trial.folder import text as folder_text
from harness.trial.interpreter import installed_torch
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import REPO_ROOT, TrialSpec, WorkloadSpec

F2_TEXT = "Detected that you are using FX to symbolically trace a dynamo-optimized function"
F3_LINE = re.compile(r"^REPRODUCED: .*CURRENT_PATCHER", re.M)
PCT_PROFILES = ("pct1", "pct2", "pct3")
COUNT_PROFILE = "pct-count"


@dataclass(kw_only=True, slots=True)
class Target:
    name: str
    """Failure mode id (F2, R5, F3)."""
    workload: WorkloadSpec
    """What each trial runs."""
    profiles: tuple[str, ...]
    """Scheduler profiles compared with plain (no plan)."""
    reproduced: Callable[[TrialResult, str], bool]
    """Does this trial (result, output text) show the failure?"""
    timeout_s: float = 180.0
    hang_s: float = 60.0


@dataclass(kw_only=True, slots=True)
class Cell:
    target: str
    profile: str
    results: list[TrialResult] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    pct: list[dict | None] = field(default_factory=list)
    """Each trial's pct summary (steps, waits, timeouts), for the pct profiles."""


def _f2_reproduced(result: TrialResult, text: str) -> bool:
    return F2_TEXT in text


def _r5_reproduced(result: TrialResult, text: str) -> bool:
    return result.outcome is Outcome.ABORT


def _f3_reproduced(result: TrialResult, text: str) -> bool:
    return F3_LINE.search(text) is not None


def _failed(result: TrialResult, text: str) -> bool:
    """A GPU repro fails only by its race (it prints SKIP and exits 0 where it cannot run)."""
    return result.outcome.is_failure


def _workload(repro: str, script: str, args: tuple[str, ...], prefer_repro: bool) -> WorkloadSpec:
    """The catalogue repro when asked for and present, else the tests/scripts workload."""
    if prefer_repro and (REPO_ROOT / "repro" / f"{repro}.py").exists():
        return WorkloadSpec(kind="repro", argv=(repro, *args))
    return WorkloadSpec(kind="command", argv=(sys.executable, str(REPO_ROOT / script), *args))


def targets(*, f2_repro: bool = False) -> dict[str, Target]:
    return {t.name: t for t in (*_cpu_targets(f2_repro), *_gpu_targets())}


def _cpu_targets(f2_repro: bool) -> tuple[Target, ...]:
    # F2 defaults to tests/scripts/sched_f2.py: its tracer thread traces occasionally (every
    # 10 ms), so the plain rate is low (1/10 before the harness) and a lift can show. The
    # catalogue repro r06 traces back to back and reproduced 4/6 plain here even with --iters 5,
    # which leaves no room for a lift; `--f2-repro` measures it anyway.
    f2 = Target(
        name="F2",
        workload=_workload(
            "r06_fx_tracing_flag", "tests/scripts/sched_f2.py", ("--calls", "100", "--pause-ms", "10"), f2_repro
        ),
        profiles=("switch", "fx-widen", *PCT_PROFILES),
        reproduced=_f2_reproduced,
    )
    # R5 runs 2 s (r16's default is 5 s) and F3 makes 20 calls per compiled function (300):
    # the failures need the resets and the compiles, and a trial of 2 cores' lift costs less.
    r5 = Target(
        name="R5",
        workload=_workload("r16_reset_segfault", "tests/scripts/sched_r5.py", ("--secs", "2"), True),
        profiles=("switch", "reset-pressure", *PCT_PROFILES),
        reproduced=_r5_reproduced,
    )
    # F3 is an FX race like F2 (two traces' save/restore of CURRENT_PATCHER interleave), so
    # fx-widen, which widens traces, is its race-specific plan.
    f3 = Target(
        name="F3",
        workload=WorkloadSpec(kind="repro", argv=("r07_current_patcher", "--calls", "20")),
        profiles=("switch", "fx-widen", *PCT_PROFILES),
        reproduced=_f3_reproduced,
    )
    return f2, r5, f3


def _gpu_targets() -> tuple[Target, ...]:
    # The capture race from two scripts (r05: two threads record graphs that draw RNG; r23: a
    # device-wide synchronize during another thread's capture) and G2 (r20, its own deadline cut
    # to 45 s: a deadlock never ends by itself, and 180 s per hung trial would spend the lift on
    # waiting). compile-chaos is measured in gpu-repros.
    def gpu(name: str, argv: tuple[str, ...], profiles: tuple[str, ...]) -> Target:
        workload = WorkloadSpec(kind="repro", argv=argv)
        return Target(
            name=name, workload=workload, profiles=profiles, reproduced=_failed, timeout_s=240.0, hang_s=120.0
        )

    return (
        gpu("capture-r05", ("r05_concurrent_record_rng",), ("switch", "pct2", "pct3")),
        gpu("capture-r23", ("r23_device_sync_during_capture",), ("switch", "pct2", "pct3")),
        gpu("G2", ("r20_flex_backward_compile_deadlock", "--deadline", "45"), ("switch", "pct2")),
    )


def plan_for(profile: str, seed: int, cal: Calibration | None = None) -> dict | None:
    """The plan of one trial; a pct plan takes the target's calibrated k."""
    if profile == "plain":
        return None
    plan = plan_from_seed(seed, profile)
    if plan.pct is not None and cal is not None and plan.pct.depth:
        plan.pct = dataclasses.replace(plan.pct, steps=cal.k)
    return plan.validate().to_dict()


def _spec(target: Target, profile: str, seed: int, index: int, cal: Calibration | None) -> TrialSpec:
    return TrialSpec(
        trial_id=f"{target.name}-{profile}-{index:03d}",
        cell=f"lift-{target.name}-{profile}",
        workload=target.workload,
        plan=plan_for(profile, seed, cal),
        timeout_s=target.timeout_s,
        hang_s=target.hang_s,
        trial_index=index,
    )


def _run_one(
    target: Target, spec: TrialSpec, store: Store, done: dict[str, TrialResult], replay_of: str | None = None
) -> tuple[TrialResult, bool]:
    """Run (or, resuming, read back) one trial; append it to the store."""
    result = done.get(spec.trial_id)
    if result is None:
        result = run_trial(spec, store.artefacts_dir(spec.trial_id), replay_of=replay_of)
        store.append(result)
    art = store.artefacts_of(result)
    text = (folder_text(art / OUTPUT) if art is not None else None) or ""
    return result, target.reproduced(result, text)


def _run_jobs(jobs: list[tuple[Target, TrialSpec]], workers: int, store: Store):
    done = {r.trial_id: r for r in store.load() if r.replay_of is None}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(t, s, pool.submit(_run_one, t, s, store, done)) for t, s in jobs]
        for t, s, fut in futures:
            result, hit = fut.result()
            print(f"  {result.trial_id}: {result.outcome.value} reproduced={hit} {result.duration_s:.1f}s", flush=True)
            yield t, s, result, hit


def calibrate(chosen: list[Target], runs: int, workers: int, seed: int, store: Store) -> dict[str, Calibration]:
    """k and n per target from `runs` counting runs each (none: the stated default)."""
    jobs = [(t, _spec(t, COUNT_PROFILE, seed + i, i, None)) for i in range(runs) for t in chosen]
    summaries: dict[str, list] = {t.name: [] for t in chosen}
    for t, _, result, _ in _run_jobs(jobs, workers, store):
        art = store.artefacts_of(result)
        summaries[t.name].append(calibration.pct_summary(art) if art is not None else None)
    return {name: calibration.calibrate(s) for name, s in summaries.items()}


def run_cells(
    chosen: list[Target],
    profiles: dict[str, tuple[str, ...]],
    trials: int,
    workers: int,
    seed: int,
    store: Store,
    cals: dict[str, Calibration],
) -> list[Cell]:
    cells = {(t.name, p): Cell(target=t.name, profile=p) for t in chosen for p in profiles[t.name]}
    jobs = []
    for i in range(trials):  # interleaved: trial i of every cell before trial i + 1 of any
        for t in chosen:
            for p in profiles[t.name]:
                jobs.append((t, _spec(t, p, seed + i, i, cals.get(t.name))))
    for t, s, result, hit in _run_jobs(jobs, workers, store):
        cell = cells[(t.name, _profile_of(s, t))]
        cell.results.append(result)
        cell.hits.append(hit)
        art = store.artefacts_of(result)
        cell.pct.append(calibration.pct_summary(art) if art is not None and s.plan else None)
    return list(cells.values())


def _profile_of(spec: TrialSpec, target: Target) -> str:
    return spec.cell.removeprefix(f"lift-{target.name}-")


def _rate(cell: Cell) -> tuple[int, int, stats.Interval]:
    k, n = sum(cell.hits), len(cell.hits)
    return k, n, stats.wilson(k, n)


def ttff(cell: Cell) -> float | None:
    """Median serial seconds to the first reproducing trial (a reproducing trial counts up to its
    failure where the runner saw one, else its whole run)."""
    times = [
        r.time_to_failure_s if hit and r.time_to_failure_s is not None else r.duration_s
        for r, hit in zip(cell.results, cell.hits)
    ]
    return stats.median_time_to_first_failure(times, cell.hits) if times else None


def depth_of(profile: str) -> int | None:
    return int(profile[3:]) if profile in PCT_PROFILES else None


def pct_bound(profile: str, cal: Calibration | None) -> float | None:
    d = depth_of(profile)
    return pct.bound(cal.n, cal.k, d) if d is not None and cal is not None else None


def format_table(cells: list[Cell], cals: dict[str, Calibration] | None = None) -> str:
    cals = cals or {}
    w = max([6, *(len(c.target) for c in cells)])
    lines = [
        f"{'target':{w}} {'plan':16} {'k/n':>7} {'p':>5} {'wilson95':>13} {'lift':>6} "
        f"{'lift_low':>8} {'mean_s':>6} {'ttff_s':>7} {'pct_bound':>9}"
    ]
    for cell in cells:
        k, n, ci = _rate(cell)
        plain = next((c for c in cells if c.target == cell.target and c.profile == "plain"), None)
        pk, pn, pci = _rate(plain) if plain is not None else (0, 0, stats.wilson(0, 0))
        p, pp = k / n if n else 0.0, pk / pn if pn else 0.0
        lift = (
            "-" if cell is plain or plain is None else ("inf" if pp == 0 and p > 0 else f"{p / pp:.1f}" if pp else "-")
        )
        low = "-" if cell is plain or plain is None else f"{ci.low / pci.high:.1f}" if pci.high else "-"
        mean_s = sum(r.duration_s for r in cell.results) / max(n, 1)
        t = ttff(cell)
        b = pct_bound(cell.profile, cals.get(cell.target))
        lines.append(
            f"{cell.target:{w}} {cell.profile:16} {f'{k}/{n}':>7} {p:5.2f} "
            f"{f'[{ci.low:.2f},{ci.high:.2f}]':>13} {lift:>6} {low:>8} {mean_s:6.1f} "
            f"{'-' if t is None else f'{t:.1f}':>7} {'-' if b is None else f'{b:.2g}':>9}"
        )
    return "\n".join(lines)


def best_plan(cells: list[Cell], target: str) -> str:
    ranked = sorted(
        (c for c in cells if c.target == target and c.profile != "plain"),
        key=lambda c: (_rate(c)[2].low, sum(c.hits)),
        reverse=True,
    )
    return ranked[0].profile if ranked else "-"


def pct_versus(cells: list[Cell], target: str, other: str = "switch") -> str | None:
    """The best pct profile against `other` on one target: above, below or overlapping (Wilson)."""
    mine = [c for c in cells if c.target == target and c.profile in PCT_PROFILES]
    theirs = next((c for c in cells if c.target == target and c.profile == other), None)
    if not mine or theirs is None:
        return None
    best = max(mine, key=lambda c: (sum(c.hits) / max(len(c.hits), 1), _rate(c)[2].low))
    (k, n, ci), (ok, on, oci) = _rate(best), _rate(theirs)
    if ci.low > oci.high:
        verdict = "beats"
    elif ci.high < oci.low:
        verdict = "loses to"
    else:
        verdict = "overlaps"
    return (
        f"{target}: best pct ({best.profile}) {k}/{n} [{ci.low:.2f},{ci.high:.2f}] {verdict} "
        f"{other} {ok}/{on} [{oci.low:.2f},{oci.high:.2f}]"
    )


def measure_replays(target: Target, cell: Cell, replays: int, workers: int, store: Store) -> str:
    """Rerun the first reproducing trial's exact spec; count same signature / same decisions."""
    first = next((r for r, hit in zip(cell.results, cell.hits) if hit), None)
    if first is None:
        return f"replay {target.name}/{cell.profile}: no reproducing trial to replay"
    spec = TrialSpec.from_json(json.loads((Path(first.artefacts) / SPEC).read_text()))
    want = decisions(str(Path(first.artefacts) / PLAN_LOG))
    specs = []
    for j in range(replays):
        s = TrialSpec.from_json(spec.to_json())
        s.trial_id = f"{first.trial_id}-replay{j:02d}"
        specs.append(s)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(lambda s: _run_one(target, s, store, {}, first.trial_id), specs))
    same_sig = sum(r.signature == first.signature for r, _ in done)
    same_dec = sum(decisions(str(Path(r.artefacts) / PLAN_LOG)) == want for r, _ in done)
    reproduced = sum(hit for _, hit in done)
    return (
        f"replay {first.trial_id} (seed {spec.plan_seed}, {cell.profile}) x{replays}: "
        f"reproduced {reproduced}/{replays}, same signature {same_sig}/{replays}, "
        f"same decision sequence {same_dec}/{replays} ({len(want)} decisions)"
    )


def to_json(cells: list[Cell], cals: dict[str, Calibration], meta: dict) -> dict:
    """The lift's data: the run, each target's calibration, each cell's rate and each trial."""
    out_cells = []
    for c in cells:
        k, n, ci = _rate(c)
        out_cells.append(
            {
                "target": c.target,
                "profile": c.profile,
                "k": k,
                "n": n,
                "p": k / n if n else None,
                "wilson_low": ci.low,
                "wilson_high": ci.high,
                "ttff_s": ttff(c),
                "pct_bound": pct_bound(c.profile, cals.get(c.target)),
                "trials": [
                    {
                        "id": r.trial_id,
                        "plan_seed": r.plan_seed,
                        "outcome": r.outcome.value,
                        "reproduced": hit,
                        "duration_s": r.duration_s,
                        "time_to_failure_s": r.time_to_failure_s,
                        "signature_summary": r.signature_summary,
                        "pct": s,
                    }
                    for r, hit, s in zip(c.results, c.hits, c.pct)
                ],
            }
        )
    return {**meta, "calibration": {name: cal.to_json() for name, cal in cals.items()}, "cells": out_cells}


def torch_version() -> str:
    return installed_torch() or "not installed"
