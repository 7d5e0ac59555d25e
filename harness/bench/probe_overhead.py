"""What the exposure probes cost the trainer, probes on vs off in one run (`python -m harness exposure-cost`).

    python -m harness exposure-cost [--preset tiny-cpu] [--rounds 6] [--steps N] [--set K=V ...]

Modelled on `python -m dflash bench`'s fault-points idle vs absent comparison: one process trains
the preset ROUNDS times after a discarded warm-up round, alternating probes off (nothing of
harness.faults.exposure installed: no point wrapped, no stage handler) and on (every probe
installed as the trial bootstrap installs it). It prints each round's tokens/s, the ratio on/off
of the best round per condition and of the medians, and the windows the probes counted, so a
reader sees they were live. A benchmark to run by hand on an idle machine, not a timed test.

Rounds of a short trainer run differ by more than the probes could cost, so it also prints what
the ratio cannot resolve: the probes' hook calls per round (point wrappers call it twice, stage
points once) times the nanoseconds one call takes with no window open (a micro-benchmark), as a
share of the round's wall time.
"""

from __future__ import annotations

import dataclasses
import io
import statistics
import sys
import tempfile
import time

from harness.faults import exposure, points
from harness.runtime import failpoints as faults


def measure(cfg, rounds: int) -> dict:
    """A discarded warm-up round, then `rounds` rounds alternating probes off and on; the record."""
    by: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="exposure-cost-") as tmp:
        cfg = dataclasses.replace(
            cfg,
            train=dataclasses.replace(
                cfg.train, out_dir=tmp, export=False, eval_prompts=0, progress=False, checkpoint_every=0, resume=False
            ),
        )
        warm = _one_round(cfg, probes=False)
        print(f"warm-up round (discarded): {warm['tokens_per_s']:.1f} tokens/s", file=sys.stderr, flush=True)
        for i in range(rounds):
            on = i % 2 == 1
            final = _one_round(cfg, probes=on)
            by[on].append(final)
            counted = f"; windows {final['windows']}" if on else ""
            print(
                f"round {i}: probes {'on' if on else 'off'}: {final['tokens_per_s']:.1f} tokens/s (steady "
                f"{final.get('tokens_per_s_steady') or 0:.1f}){counted}",
                file=sys.stderr,
                flush=True,
            )
    return _record(cfg, by)


def hook_cost_ns(calls: int = 200_000) -> dict[str, float]:
    """Nanoseconds per probe hook call with no window open: a compiled call's check, a region
    entered and left (a frame conversion), a stage point."""
    probe = exposure.Exposure(None)
    hook, stage = probe.hook, probe.stage

    def timed(fn) -> float:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / calls

    return {
        "compiled.call": timed(lambda: [hook("compiled.call", "before") for _ in range(calls)]),
        "region": timed(
            lambda: [
                (hook("dynamo.convert_frame", "before"), hook("dynamo.convert_frame", "after"))
                for _ in range(calls // 2)
            ]
        ),
        "stage": timed(lambda: [stage("drafter.after_get") for _ in range(calls)]),
    }


def _one_round(cfg, *, probes: bool) -> dict:
    # torch and the trainer load only when a round runs, so that --help answers without them
    import torch._dynamo  # noqa: I001  (the two deferred imports, each with its reason)

    # the trainer imports torch and transformers (seconds)
    from dflash.train import train

    # Fresh Dynamo caches per round, as dflash bench does: each round compiles its own step.
    torch._dynamo.reset()
    probe, stages = None, [0]
    if probes:
        probe = exposure.Exposure(None)
        points.install_lazily(exposure.needed_points(), probe.hook)

        def stage(name: str) -> None:
            stages[0] += 1
            probe.stage(name)

        points.add_stage_handler(stage)
    t0 = time.perf_counter()
    try:
        outcome = train(cfg, out=io.StringIO())
    finally:
        wall_s = time.perf_counter() - t0
        hook_calls = 2 * sum(points.HITS.values()) + stages[0]
        points.uninstall_all()
        faults.set_handler(None)
    if outcome.exit_code != 0 or outcome.final is None:
        report = outcome.pipeline.report() if outcome.pipeline else ""
        raise RuntimeError(
            f"round failed with exit code {outcome.exit_code} (a race of the run's own fixes: "
            f"pass --set fixes=...)\n{report}"
        )
    return {
        **outcome.final,
        "windows": dict(probe.counts) if probe is not None else None,
        "wall_s": wall_s,
        "hook_calls": hook_calls if probe is not None else 0,
    }


def _record(cfg, rounds: dict[bool, list[dict]]) -> dict:
    ns = hook_cost_ns()
    calls = statistics.median(r["hook_calls"] for r in rounds[True])
    wall_s = statistics.median(r["wall_s"] for r in rounds[True])

    def ratio(key: str, pick) -> float | None:
        figures = {on: [r[key] for r in rs if isinstance(r.get(key), (int, float))] for on, rs in rounds.items()}
        if not figures[False] or not figures[True]:
            return None
        return round(pick(figures[True]) / pick(figures[False]), 4)

    return {
        "event": "exposure-cost",
        "preset": cfg.preset,
        "steps": cfg.train.steps,
        "tokens_per_s_off": max(r["tokens_per_s"] for r in rounds[False]),
        "tokens_per_s_on": max(r["tokens_per_s"] for r in rounds[True]),
        "on_over_off": ratio("tokens_per_s", max),
        "on_over_off_median": ratio("tokens_per_s", statistics.median),
        # The second half of each run's steps (the trainer's own figure): compiles left out.
        "steady_on_over_off": ratio("tokens_per_s_steady", max),
        "steady_on_over_off_median": ratio("tokens_per_s_steady", statistics.median),
        "rounds_off": [round(r["tokens_per_s"], 1) for r in rounds[False]],
        "rounds_on": [round(r["tokens_per_s"], 1) for r in rounds[True]],
        "steady_off": [round(r["tokens_per_s_steady"], 1) for r in rounds[False] if r.get("tokens_per_s_steady")],
        "steady_on": [round(r["tokens_per_s_steady"], 1) for r in rounds[True] if r.get("tokens_per_s_steady")],
        "windows": [r["windows"] for r in rounds[True]],
        "torch": rounds[False][0].get("torch"),
        "hook_calls_per_round": calls,
        "hook_ns": {k: round(v, 1) for k, v in ns.items()},
        "hook_share_of_round": round(calls * max(ns.values()) * 1e-9 / wall_s, 6),
    }
