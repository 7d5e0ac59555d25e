"""`python -m dflash bench`: throughput, stage busy fractions, and what fault points cost.

One invocation trains the preset ROUNDS times alternating two conditions: fault points absent
(no handler: `fault_point` is one global read) and installed-but-idle (a handler that matches
nothing, as the harness installs when a plan never fires). The ratio idle/absent of the best
tokens/s per condition is the overhead of the instrumentation on the real pipeline; the
micro-benchmark gives the per-call cost of `fault_point` when off. Alternating the order keeps
cache warm-up from favouring one condition.

With `--oracle-every N` the second condition is the differential oracle on every N-th step
(dflash.oracle) instead of idle fault points, both with fault points absent: the ratio
oracle/off is what the oracle costs on the real pipeline.
"""

from __future__ import annotations

import dataclasses
import io
import json
import statistics
import sys
import tempfile

from dflash.config import RunConfig
from dflash.devices import resolve
from dflash.gpu_busy import GpuBusy
from dflash.train import train
from harness.runtime import failpoints as faults

ROUNDS = 4
MICRO_CALLS = 200_000


def _idle_handler(name: str) -> None:
    """Installed but never acts: the cost of a live hook with nothing to do."""


def _one_run(cfg: RunConfig, idle: bool) -> dict:
    # torch._dynamo takes about as long to import as torch: loaded when a run starts
    import torch._dynamo

    # Fresh Dynamo caches per round: each round builds new modules, and stale entries would
    # push the shared code objects over the recompile limit (F10) and skew later rounds.
    torch._dynamo.reset()
    faults.set_handler(_idle_handler if idle else None)
    try:
        with GpuBusy(_drafter_gpu(cfg)) as busy:
            outcome = train(cfg, out=io.StringIO())
    finally:
        faults.set_handler(None)
    if outcome.exit_code != 0 or outcome.final is None:
        report = outcome.pipeline.report() if outcome.pipeline else ""
        raise RuntimeError(f"bench run failed with exit code {outcome.exit_code}\n{report}")
    window = outcome.steady_window
    return {
        **outcome.final,
        "gpu_busy": busy.fraction,
        "gpu_busy_steady": busy.fraction_between(*window) if window else None,
    }


def _drafter_gpu(cfg: RunConfig) -> int | None:
    """Index of the first drafter GPU as the plan resolves it (remap included); None on CPU."""
    device = resolve(
        cfg.devices,
        num_target_threads=cfg.pipeline.num_target_threads,
        num_drafter_threads=cfg.pipeline.num_drafter_threads,
    ).drafter[0]
    return device.index if device.type == "cuda" else None


def bench(cfg: RunConfig, *, rounds: int = ROUNDS, oracle_every: int = 0) -> int:
    """`rounds` runs alternating fault points absent / idle (after a discarded warm-up when
    rounds > 1); rounds = 1 measures the absent condition only (throughput and GPU busy).
    oracle_every > 0: alternating oracle off / on every oracle_every steps instead."""
    faults.clear()
    off_ns = faults.measure_off_cost(MICRO_CALLS)
    with tempfile.TemporaryDirectory(prefix="dflash-bench-") as tmp:
        cfg = _bench_config(cfg, tmp, oracle_every)
        results = _rounds(cfg, rounds, oracle_every)
    if oracle_every:
        return _report_oracle(cfg, oracle_every, results, off_ns)
    return _report_faults(cfg, results, off_ns)


def _bench_config(cfg: RunConfig, out_dir: str, oracle_every: int) -> RunConfig:
    """The measured runs' config: no export, evaluation, progress, checkpoints or resume."""
    return dataclasses.replace(
        cfg,
        train=dataclasses.replace(
            cfg.train,
            out_dir=out_dir,
            export=False,
            eval_prompts=0,
            progress=False,
            checkpoint_every=0,
            resume=False,
            oracle_every=0 if oracle_every else cfg.train.oracle_every,
        ),
    )


def _rounds(cfg: RunConfig, rounds: int, oracle_every: int) -> dict[bool, list[dict]]:
    """The final records of each condition's rounds: {second condition?: [records]}."""
    checked = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, oracle_every=oracle_every))
    results: dict[bool, list[dict]] = {False: [], True: []}
    if rounds > 1:
        # One discarded round first: on a cold process the first rounds run measurably slower
        # (allocator, caches, lazy imports), which would bias whichever condition goes first.
        # With one round nothing is compared, and each round recompiles (a minute on the
        # H200, where a 5-round bench overran its 200 s), so `--rounds 1` skips it.
        warm = _one_run(cfg, False)
        print(f"warm-up round (discarded): {warm['tokens_per_s']:.1f} tokens/s", file=sys.stderr, flush=True)
    for i in range(rounds):
        second = i % 2 == 1
        if oracle_every:
            final = _one_run(checked if second else cfg, False)
            what = f"oracle every {oracle_every}" if second else "oracle off"
        else:
            final = _one_run(cfg, second)
            what = f"fault points {'idle' if second else 'absent'}"
        results[second].append(final)
        print(
            f"round {i}: {what}: {final['tokens_per_s']:.1f} tokens/s (steady {final['tokens_per_s_steady']})",
            file=sys.stderr,
            flush=True,
        )
    return results


def _report_faults(cfg: RunConfig, results: dict[bool, list[dict]], off_ns: float) -> int:
    """The fault-point bench's record: the best round of each condition and their ratio."""
    best = {k: max(v, key=lambda f: f["tokens_per_s"]) for k, v in results.items() if v}
    absent, top = best[False]["tokens_per_s"], best[False]
    idle = best[True]["tokens_per_s"] if True in best else None
    record = {
        "event": "bench",
        "preset": cfg.preset,
        "steps": cfg.train.steps,
        "tokens_per_s": absent,
        "tokens_per_s_faults_idle": idle,
        "faults_idle_over_absent": round(idle / absent, 4) if absent and idle is not None else None,
        "tokens_per_s_steady": top["tokens_per_s_steady"],
        "busy": top["busy"],
        "gpu_busy": top["gpu_busy"],
        "gpu_busy_steady": top["gpu_busy_steady"],
        "fault_point_off_ns": round(off_ns, 2),
        "device_plan": top["device_plan"],
        "torch": top["torch"],
        "fixes": top["fixes"],  # resolved: a GPU preset's default is `recommended`
        "fix_stats": top.get("fix_stats"),
        "phases": top.get("phases"),
    }
    idle_text = "not measured" if idle is None else f"{idle:.1f}"
    print(
        f"tokens/s {absent:.1f} (fault points idle: {idle_text}, ratio "
        f"{record['faults_idle_over_absent']}); busy {record['busy']}; gpu busy {record['gpu_busy']} "
        f"(steady half {record['gpu_busy_steady']}); "
        f"fault_point off: {off_ns:.1f} ns/call",
        file=sys.stderr,
    )
    print(json.dumps(record), flush=True)
    return 0


def _report_oracle(cfg: RunConfig, every: int, results: dict[bool, list[dict]], off_ns: float) -> int:
    """The oracle bench's record, printed with its one-line summary."""
    record = _oracle_record(cfg, every, results, off_ns)
    on_text = (
        "not measured"
        if record["tokens_per_s_oracle"] is None
        else f"{record['tokens_per_s_oracle']:.1f} (steady {record['tokens_per_s_steady_oracle']})"
    )
    print(
        f"tokens/s {record['tokens_per_s']:.1f} (steady {record['tokens_per_s_steady']}) oracle off; "
        f"{on_text} oracle every {every}; best over best {record['oracle_over_off']} (steady "
        f"{record['oracle_over_off_steady']}), paired steady median "
        f"{record['oracle_over_off_paired_median']}; checks take {record['oracle_share_of_drafter']} "
        "of the drafter threads' time",
        file=sys.stderr,
    )
    print(json.dumps(record), flush=True)
    return 0


def _paired_ratios(results: dict[bool, list[dict]]) -> list[float]:
    """Steady ratios of round 2k+1 over round 2k, run next to each other: on a shared machine the
    load drifts more between the rounds than within a pair."""
    return sorted(
        b["tokens_per_s_steady"] / a["tokens_per_s_steady"]
        for a, b in zip(results[False], results[True])
        if a["tokens_per_s_steady"] and b["tokens_per_s_steady"]
    )


def _oracle_record(cfg: RunConfig, every: int, results: dict[bool, list[dict]], off_ns: float) -> dict:
    """The best round of each condition, whole-run and steady rates, and the median paired ratio."""
    off = max(results[False], key=lambda f: f["tokens_per_s"])
    on = max(results[True], key=lambda f: f["tokens_per_s"]) if results[True] else None

    def ratio(key: str) -> float | None:
        return round(on[key] / off[key], 4) if on and on[key] and off[key] else None

    paired = _paired_ratios(results)
    share = None
    if on and on["oracle"] and on["elapsed_s"]:
        # The checks' own time over the drafter threads' time: what the oracle takes of a
        # drafter thread, whichever stage bounds the throughput.
        share = round(on["oracle"]["seconds"] / (on["elapsed_s"] * cfg.pipeline.num_drafter_threads), 4)
    return {
        "event": "bench",
        "preset": cfg.preset,
        "steps": cfg.train.steps,
        "tokens_per_s": off["tokens_per_s"],
        "tokens_per_s_steady": off["tokens_per_s_steady"],
        "oracle_every": every,
        "tokens_per_s_oracle": on["tokens_per_s"] if on else None,
        "tokens_per_s_steady_oracle": on["tokens_per_s_steady"] if on else None,
        "oracle_over_off": ratio("tokens_per_s"),
        "oracle_over_off_steady": ratio("tokens_per_s_steady"),
        "oracle_over_off_paired": [round(r, 4) for r in paired],
        "oracle_over_off_paired_median": round(statistics.median(paired), 4) if paired else None,
        "oracle_share_of_drafter": share,
        "oracle": on["oracle"] if on else None,
        "busy": off["busy"],
        "busy_oracle": on["busy"] if on else None,
        "fault_point_off_ns": round(off_ns, 2),
        "device_plan": off["device_plan"],
        "torch": off["torch"],
        "fixes": off["fixes"],
    }
