"""`python -m harness matrix`: run a matrix of trials (resumable), or say what it would run.

python -m harness matrix [--preset NAME | --file SPEC.json | --list] [--store DIR] [--cells GLOB]
                         [--trials N [--every-group]]
                         [--workers N] [--per-gpu N] [--gpus N] [--pack-by-memory GIB] [--max-failures N]
                         [--max-time S] [--finish-by S] [--json] [--no-live]
                         [--pending | --replay-last N] [--backend local|ray [--address ADDR]]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from harness import stats
from harness.analysis.cell_tables import (
    NOT_MEASURED_NOTE,
    exposure_lines,
    has_exposure,
    signature_lines,
    summary_json,
    text_legend,
    text_table,
)
from harness.analysis.excerpts import native_excerpts
from harness.analysis.summary import summarize
from harness.args import UsageError, comma_list, positive_float, positive_int
from harness.campaign import backends, ray_backend
from harness.campaign.loop import format_elapsed
from harness.campaign.matrix import presets as matrix_presets
from harness.campaign.matrix import slots
from harness.campaign.matrix.expand import expand
from harness.campaign.matrix.planning import memory_peaks, pending_plan, pool_order, replay_last
from harness.campaign.matrix.run import MatrixRun, run_matrix
from harness.campaign.matrix.spec import MatrixSpec
from harness.campaign.matrix.specfile import load_spec
from harness.diagnosis import diagnose
from harness.stores.store import Store
from harness.text import clip
from harness.trial.outcome import Outcome

HELP = "run a matrix of trials (resumable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    _source_arguments(p)
    _pool_arguments(p)
    _run_arguments(p)


def _source_arguments(p: argparse.ArgumentParser) -> None:
    """Which matrix, which of its cells and how many trials; --list and --pending run nothing."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", help=f"one of: {', '.join(matrix_presets.names())} (default {matrix_presets.DEFAULT_PRESET})"
    )
    src.add_argument("--file", help="JSON matrix spec (see harness.campaign.matrix.specfile.spec_from_dict)")
    src.add_argument("--list", action="store_true", help="list the presets and their cells")
    p.add_argument(
        "--pending",
        action="store_true",
        help="run nothing: per cell, what the store holds and what the next run would start",
    )
    p.add_argument("--store", help="store folder (default results/<matrix name>)")
    p.add_argument(
        "--cells",
        action="append",
        metavar="GLOB",
        help="only the cells whose name (workload:strategy@plan) matches a glob; "
        "repeat or separate with commas (ids do not change: the store resumes)",
    )
    p.add_argument(
        "--trials",
        "--max-trials",
        type=positive_int,
        help="trials per cell (the spec's default; groups with their own count keep it)",
    )
    p.add_argument(
        "--every-group",
        action="store_true",
        help="--trials also for groups with their own count (a control that became a candidate)",
    )


def _pool_arguments(p: argparse.ArgumentParser) -> None:
    """How many trials run at once, on which GPUs."""
    p.add_argument("--workers", type=positive_int, help="trials at once (default: the spec's)")
    p.add_argument("--per-gpu", type=positive_int, help="trials sharing one GPU at once")
    p.add_argument("--gpus", type=int, help="GPUs to use (default: detected)")
    p.add_argument(
        "--pack-by-memory",
        type=positive_float,
        metavar="GIB",
        help="GPUs of GIB GiB: a cell whose stored memory peaks need fewer of --per-gpu's slots "
        "than its workload's gpu_slots takes fewer (more of it at once)",
    )


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """When trials stop (--replay-last: none start), where and under what they run, what is printed."""
    p.add_argument("--max-failures", type=positive_int, help="stop a cell after this many failures")
    p.add_argument("--max-time", type=positive_float, help="start no trial after this many seconds")
    p.add_argument(
        "--finish-by",
        type=positive_float,
        metavar="S",
        help="start a trial only if its cell's stored median duration ends it within S seconds "
        "(for a caller that kills the matrix then)",
    )
    p.add_argument(
        "--replay-last",
        type=positive_int,
        metavar="N",
        help="run nothing: replay the store's last N records (one run's) as the pool packs them, "
        "strict order against bounded backfill, at their recorded durations",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="run the trials under this interpreter (another venv's torch); its torch version "
        "is recorded with every trial and fills a store named with {torch}",
    )
    backends.add_arguments(p, "trials")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-live", action="store_true", help="plain progress lines even on a terminal")


def matrix_from_options(opts: argparse.Namespace) -> MatrixSpec:
    spec = load_spec(opts.file) if opts.file else matrix_presets.get(opts.preset or matrix_presets.DEFAULT_PRESET)
    changes = {
        k: v
        for k, v in (
            ("store", opts.store),
            ("workers", opts.workers),
            ("per_gpu", opts.per_gpu),
            ("max_failures", opts.max_failures),
            ("max_time_s", opts.max_time),
            ("finish_by_s", opts.finish_by),
            ("gpu_mem_gib", opts.pack_by_memory),
            ("python", opts.python),
        )
        if v is not None
    }
    if opts.cells:
        changes["only"] = tuple(comma_list(opts.cells))
    if opts.trials is not None:
        # The matrix default only: a group with its own count keeps it (gpu-campaign's eager
        # control stays at 10 while --trials 30 goes to the candidates).
        changes["trials"] = opts.trials
        if opts.every_group:
            # Where eager is the fastest clean cell (gpu-bound), the control is a candidate and
            # needs the campaign's 29 stressed trials.
            changes["groups"] = tuple(dataclasses.replace(g, trials=None) for g in spec.groups)
    elif opts.every_group:
        raise UsageError("--every-group needs --trials")
    return dataclasses.replace(spec, **changes) if changes else spec


def run(opts: argparse.Namespace) -> int:
    if opts.list:
        _print_presets()
        return 0
    spec = matrix_from_options(opts)
    if opts.pending:
        _print_pending(spec, gpus=opts.gpus or 1)
        return 0
    if opts.replay_last is not None:
        _print_replay(spec, opts.replay_last, gpus=opts.gpus or 1)
        return 0
    if opts.backend != "ray":
        if opts.address is not None:
            raise UsageError("--address needs --backend ray")
        done = run_matrix(spec, live=False if opts.no_live else None, num_gpus=opts.gpus)
    else:
        done = _run_on_ray(spec, opts)
    cells = summarize(done.records)
    findings = diagnose.diagnose(diagnose.from_records(done.records, spec.store_dir))
    if opts.json:
        print(
            json.dumps(
                summary_json(
                    cells,
                    matrix=spec.name,
                    store=str(spec.store_dir),
                    ran=done.ran,
                    resumed=done.resumed,
                    left=done.left,
                    left_by_time=done.left_by_time,
                    lost=done.lost,
                    elapsed_s=round(done.elapsed_s, 3),
                    diagnosis=[f.to_json() for f in findings],
                ),
                indent=2,
            )
        )
    else:
        _print_matrix_table(done, cells)
        if findings:
            print("\n" + diagnose.render(findings, brief=True))
    return 1 if any(r.outcome is Outcome.HARNESS_ERROR for r in done.records) else 0


def _run_on_ray(spec: MatrixSpec, opts: argparse.Namespace) -> MatrixRun:
    """The matrix as Ray tasks; bad input (no Ray, a bad spec or address) fails before any trial."""
    if opts.gpus is not None:
        raise UsageError("--gpus counts this host's GPUs; with --backend ray the cluster's scheduler hands them out")
    ray_backend.require()
    expand(spec)
    backend = ray_backend.RayBackend(opts.address)
    try:
        return run_matrix(spec, live=False if opts.no_live else None, backend=backend, workers=opts.workers)
    finally:
        backend.close()


def _print_pending(spec, *, gpus: int = 1) -> None:
    """`--pending`: per cell stored/failures/next, then totals and a trial-seconds estimate (the
    cell's median stored duration, else the median over the whole store) to plan GPU time:
    summed, and packed as the pool would pack them on `gpus` GPUs (CellPlan.share)."""
    plans = pending_plan(spec, gpus=gpus)
    records = Store(spec.store_dir).load()
    fallback = stats.median_or_none([p.median_s for p in plans if p.median_s is not None])
    if fallback is None:  # cells not run yet (e.g. a --cells subset): the whole store's median
        fallback = stats.median_or_none(
            [r.duration_s for r in records if r.duration_s is not None and r.matrix == spec.name]
        )
    width = max((len(p.cell) for p in plans), default=4)
    print(f"{'cell':<{width}}  stored  failed  other  next")
    for p in plans:
        note = " (stopped by --max-failures)" if p.stopped else ""
        print(f"{p.cell:<{width}}  {p.stored:>6}  {p.failures:>6}  {p.other:>5}  {p.pending:>4}{note}")
    pending = sum(p.pending for p in plans)
    seconds = sum(p.pending * (p.median_s or fallback or 0.0) for p in plans)
    wall = sum(p.pending * (p.median_s or fallback or 0.0) * p.share for p in plans)
    stopped = sum(p.stopped for p in plans)
    estimate = (
        (
            f"~{seconds / 60:.0f} trial-minutes at the stored medians, at least ~{wall / 60:.0f} minutes "
            f"of wall time packed as the spec packs them (workers {spec.workers}, per_gpu {spec.per_gpu}"
            f"{f', by memory peaks on {spec.gpu_mem_gib:g} GiB GPUs' if spec.gpu_mem_gib else ''} "
            f"on {gpus} GPU{'s' if gpus > 1 else ''})"
        )
        if fallback
        else "no stored durations yet"
    )
    print(
        f"{spec.name}: {len(plans)} cells, {sum(p.planned for p in plans)} planned trials, "
        f"{sum(p.stored + p.other for p in plans)} records stored, {pending} pending, {stopped} cells stopped; "
        f"{estimate}"
    )
    if fallback and pending:
        # The bound above assumes perfect packing; the pool packs in order, with bounded backfill.
        key = pool_order([p.cell for p in plans])
        queued = sorted(((p, i) for p in plans for i in p.pending_indices), key=lambda pi: key(pi[0].cell, pi[1]))
        jobs = [slots.Job(seconds=p.median_s or fallback, need=p.gpus, weight=p.slots) for p, _ in queued]
        run = slots.strict_and_backfill(jobs, workers=spec.workers, num_gpus=gpus, per_gpu=spec.per_gpu)
        print(
            f"as the pool would run them (harness.campaign.matrix.slots.simulate, the stored medians): ~{run['backfill'] / 60:.0f} "
            f"minutes of wall time; in strict order ~{run['strict'] / 60:.0f}"
        )
    for peak in memory_peaks(spec, records):
        print(f"GPU memory, {peak.line()}")


def _print_presets() -> None:
    for name in matrix_presets.names():
        spec = matrix_presets.get(name)
        cells = spec.cells()
        print(f"{name}: {len(cells)} cells, {sum(c.trials for c in cells)} trials, store {spec.store_dir}")
        for c in cells:
            print(f"  {c.name} x{c.trials}")


def _left_words(done: MatrixRun) -> str:
    """'N left (k by the failure rule, m not started before --max-time)': what ended them; and the
    trials lost with their worker or node, if any."""
    by_rule = done.left - done.left_by_time
    parts = [f"{by_rule} by the failure rule"] if by_rule else []
    clock = "before --max-time" + (" or to end by --finish-by" if done.spec.finish_by_s is not None else "")
    parts += [f"{done.left_by_time} not started {clock}"] if done.left_by_time else []
    lost = f", {done.lost} lost with their worker or node (rerun to run them)" if done.lost else ""
    return f"{done.left} left" + (f" ({', '.join(parts)})" if parts else "") + lost


def _print_matrix_table(done: MatrixRun, cells) -> None:

    print(
        f"matrix {done.spec.name}: ran {done.ran} trials in {format_elapsed(done.elapsed_s)}, "
        f"{done.resumed} already in {done.spec.store_dir}, {_left_words(done)}"
    )
    print(text_table(cells))
    print("\n".join(text_legend(cells)))
    windows = exposure_lines(cells)
    if windows:
        print("\nwindows (harness.faults.exposure: trials each opened in / measured, openings):")
        for line in windows:
            print(f"  {line}")
    elif not has_exposure(cells):
        print(f"\n{NOT_MEASURED_NOTE}")
    sigs = signature_lines(cells)
    if sigs:
        print("\nsignatures:")
        for line in sigs:
            print(f"  {line}")
    sites = native_excerpts(done.records, done.spec.store_dir)
    if sites:
        print("\nnative crash sites (harness.trial.native; `python -m harness show TRIAL_ID` for one trial):")
        for x in sites:
            print(f"  {clip(x.summary, 80)}: {x.site} in {x.trials}/{x.of} (e.g. {x.trial_id})")
    errors = [r for r in done.records if r.outcome is Outcome.HARNESS_ERROR]
    for r in errors[:5]:
        print(f"harness error: {r.trial_id}: {r.detail}", file=sys.stderr)


def _print_replay(spec: MatrixSpec, last: int, *, gpus: int = 1) -> None:
    """`--replay-last N`: the store's last N records (one run's, as `harness merge` appends them)
    replayed on the pool's admission rule, against the span the run itself took."""
    got = replay_last(spec, Store(spec.store_dir).load(), last, num_gpus=gpus)
    recorded = f"; the run itself spanned {got['recorded'] / 60:.1f}" if "recorded" in got else ""
    ratio = f" ({got['backfill'] / got['strict']:.2f}x)" if got["strict"] > 0 else ""
    print(
        f"{spec.name}, last {last} records: strict order {got['strict'] / 60:.1f} minutes, bounded backfill "
        f"{got['backfill'] / 60:.1f}{ratio}{recorded}"
    )
