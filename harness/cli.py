"""Command line of the harness.

    python -m harness matrix [--preset NAME | --file SPEC.json | --list] [--store DIR] [--cells GLOB]
                             [--trials N [--every-group]]
                             [--workers N] [--per-gpu N] [--gpus N] [--pack-by-memory GIB] [--max-failures N]
                             [--max-time S] [--finish-by S] [--json] [--no-live]
    python -m harness stress [-p N] [--timeout S] [--hang S] [--max-runs N] [--max-fails N]
                             [--max-time S] [--failure RE] [--ignore RE] [--plan PROFILE] [-o DIR]
                             -- CMD ...
    python -m harness replay TRIAL_ID [--store DIR] [-n N] [--json]
    python -m harness shrink TRIAL_ID [--store DIR] [-n N] [-p N] [--json]
    python -m harness show TRIAL_ID [--store DIR]
    python -m harness report [--store DIR ...] [--out REPORT.md]
    python -m harness families [--store DIR ...]
    python -m harness resign [--store DIR ...]
    python -m harness retire --store DIR --cells GLOB[,GLOB] --reason TEXT
    python -m harness merge SRC [SRC ...] --into DIR
    python -m harness pack [--store DIR ...]
    python -m harness crosstab FIX [--family NAME ...] [--cells GLOB ...] [--without FIX ...] [--store DIR ...]
                               [--json]
    python -m harness run SPEC.json [--artefacts DIR]
    python -m harness doctor [--json] [--timeout S]
    python -m harness lift ...            (harness.campaign.lift)

Exit codes: 0 done; 1 matrix with harness errors, stress/replay/run with failures, shrink of a
trial that no longer reproduces; 2 bad input (one line `error: ...`, nothing written); 130 / 143
after SIGINT / SIGTERM (running trials are killed and not recorded, so rerunning the same command
resumes with them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from harness.campaign import presets
from harness.campaign.matrix import MatrixError, MatrixRun, MatrixSpec, run_matrix
from harness.campaign.presets import load_spec
from harness.trial.outcome import Outcome


from harness.args import Parser as _Parser
from harness.args import UsageError, comma_list
from harness.args import positive_float as _positive_float
from harness.args import positive_int as _positive_int


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness", description="Race diagnosis harness.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    m = sub.add_parser("matrix", help="run a matrix of trials (resumable)")
    src = m.add_mutually_exclusive_group()
    src.add_argument("--preset", help=f"one of: {', '.join(presets.PRESETS)} (default {presets.DEFAULT_PRESET})")
    src.add_argument("--file", help="JSON matrix spec (see harness.campaign.presets.spec_from_dict)")
    src.add_argument("--list", action="store_true", help="list the presets and their cells")
    m.add_argument("--pending", action="store_true",
                   help="run nothing: per cell, what the store holds and what the next run would start")
    m.add_argument("--store", help="store folder (default results/<matrix name>)")
    m.add_argument("--cells", action="append", metavar="GLOB",
                   help="only the cells whose name (workload:strategy@plan) matches a glob; "
                        "repeat or separate with commas (ids do not change: the store resumes)")
    m.add_argument("--trials", "--max-trials", type=_positive_int, help="trials per cell (the spec's default; groups with their own count keep it)")
    m.add_argument("--every-group", action="store_true",
                   help="--trials also for groups with their own count (a control that became a candidate)")
    m.add_argument("--workers", type=_positive_int, help="trials at once (default: the spec's)")
    m.add_argument("--per-gpu", type=_positive_int, help="trials sharing one GPU at once")
    m.add_argument("--gpus", type=int, help="GPUs to use (default: detected)")
    m.add_argument("--pack-by-memory", type=_positive_float, metavar="GIB",
                   help="GPUs of GIB GiB: a cell whose stored memory peaks need fewer of --per-gpu's slots "
                        "than its workload's gpu_slots takes fewer (more of it at once)")
    m.add_argument("--max-failures", type=_positive_int, help="stop a cell after this many failures")
    m.add_argument("--max-time", type=_positive_float, help="start no trial after this many seconds")
    m.add_argument("--finish-by", type=_positive_float, metavar="S",
                   help="start a trial only if its cell's stored median duration ends it within S seconds "
                        "(for a caller that kills the matrix then)")
    m.add_argument("--json", action="store_true", help="print the summary as JSON")
    m.add_argument("--no-live", action="store_true", help="plain progress lines even on a terminal")

    s = sub.add_parser("stress", help="run a command over and over in parallel (like Go's stress)")
    from harness.campaign.stress import add_arguments

    add_arguments(s)

    r = sub.add_parser("replay", help="rerun a stored trial N times and count its signature")
    r.add_argument("trial_id")
    r.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")
    r.add_argument("-n", "--times", type=_positive_int, default=10)
    r.add_argument("--json", action="store_true")

    sh = sub.add_parser("shrink", help="which parts of a failing trial's fault plan the failure needs")
    sh.add_argument("trial_id")
    sh.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")
    sh.add_argument("-n", "--times", type=_positive_int, default=5, help="runs per candidate plan (default 5)")
    sh.add_argument("-p", "--workers", type=_positive_int, help="runs at once (default: min(n, cores))")
    sh.add_argument("--json", action="store_true")

    dg = sub.add_parser("diagnose", help="which known race a failure is, the fixes that held against it, its repro")
    from harness.diagnosis.diagnose import add_arguments as diagnose_arguments

    diagnose_arguments(dg)

    sw = sub.add_parser("show", help="one stored trial, readable: failure, family, tracebacks, native and hang dumps")
    sw.add_argument("trial_id")
    sw.add_argument("--store", action="append", help="store folder(s) to search (default: results/*)")

    rep = sub.add_parser("report", help="rebuild REPORT.md's generated tables and plots from stores")
    rep.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")
    rep.add_argument("--out", default="REPORT.md")

    fm = sub.add_parser("families", help="failing trials per failure family and torch version over some stores")
    fm.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")

    rs = sub.add_parser("resign", help="regroup stored failures of an older signature version from their artefacts")
    rs.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")

    rt = sub.add_parser("retire", help="take a store's records of some cells out of the count (kept in <store>/retired)")
    rt.add_argument("--store", required=True, help="the store folder")
    rt.add_argument("--cells", required=True, help="cell glob(s), comma-separated (as matrix --cells)")
    rt.add_argument("--reason", required=True, help="why they stop counting (kept in retired/reasons.jsonl)")

    mg = sub.add_parser("merge", help="fold other copies of a store (another call, another machine) into one")
    mg.add_argument("sources", nargs="+", help="store folder(s) to read")
    mg.add_argument("--into", required=True, help="the store folder that receives their records")

    pk = sub.add_parser("pack", help="pack a store's finished trial folders into one zip each (read as before)")
    pk.add_argument("--store", action="append", help="store folder(s) (default: every results/*/ store)")

    ct = sub.add_parser("crosstab", help="does a fix go with a failure family: trials with it vs without")
    from harness.analysis.crosstab import add_arguments as crosstab_arguments

    crosstab_arguments(ct)

    pr = sub.add_parser("price", help="what fixes cost alone on the machine: interleaved benches, paired ratios")
    pr.add_argument("configs", nargs="+", metavar="FIXES[:MODE]",
                    help="configurations, the first is the base: comma-separated fixes, then the compile "
                         "mode (default the preset's): `global-lock,stash-incref`, `global-lock:default`, `:none` (eager)")
    pr.add_argument("--preset", default="tiny-cpu", help="dflash preset (default tiny-cpu)")
    pr.add_argument("--rounds", type=_positive_int, default=3, help="benches per configuration, alternating order (default 3)")
    pr.add_argument("--steps", type=_positive_int, default=60, help="optimizer steps per bench (default 60)")
    pr.add_argument("--set", dest="sets", action="append", default=[], metavar="K=V",
                    help="dflash override for every bench (e.g. a device plan)")
    pr.add_argument("--topology", type=int, metavar="GPUS",
                    help="the seed trainer's device plan on this many GPUs (>= 4; 2-3: one target and one drafter per GPU)")
    pr.add_argument("--timeout-s", type=_positive_float, default=600.0, help="per bench (default 600)")
    pr.add_argument("--into", type=Path, help="append the bench records to this JSONL (harness.analysis.benches format)")
    pr.add_argument("--call", type=int, help="device call number recorded with them (REPORT groups benches by call)")
    pr.add_argument("--target", type=_positive_float, help="say whether each ratio's interval clears this (e.g. 1.2)")

    dr = sub.add_parser("doctor", help="what this torch/Python/CUDA means for threads (each fact probed in a subprocess)")
    from harness.diagnosis.doctor import add_arguments as doctor_arguments

    doctor_arguments(dr)

    run = sub.add_parser("run", help="run one trial from a TrialSpec JSON file")
    run.add_argument("spec")
    run.add_argument("--artefacts", help="artefacts folder (default: runs/trials/<trial id>)")

    lift = sub.add_parser("lift", help="harness.campaign.lift (arguments passed through)", add_help=False)
    lift.add_argument("args", nargs=argparse.REMAINDER)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (running trials killed and left for resume), exit 143."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lift"]:
        # Pass everything through untouched, including --help and options argparse would eat.
        from harness.campaign import lift
        return lift.main(argv[1:])
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        opts = build_parser().parse_args(argv)
        return _dispatch(opts)
    except KeyboardInterrupt as e:
        print("terminated" if isinstance(e, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except BrokenPipeError:
        # `... | head`: the reader left. Point stdout at /dev/null so the interpreter's final
        # flush does not raise again (Python docs, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except _user_errors() as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)


def _user_errors() -> tuple[type[BaseException], ...]:
    from dflash.errors import UserInputError
    from harness.analysis.benches import BenchError
    from harness.analysis.crosstab import CrosstabError
    from harness.diagnosis.catalogue import CatalogueError
    from harness.diagnosis.diagnose import DiagnoseError
    from harness.campaign.replay import ReplayError
    from harness.faults.scheduler import InvalidPlan
    from harness.trial.spec import InvalidSpec
    from harness.stores.store import StoreError

    return (UsageError, MatrixError, InvalidSpec, InvalidPlan, StoreError, ReplayError, UserInputError, BenchError,
            CrosstabError, CatalogueError, DiagnoseError)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _dispatch(opts: argparse.Namespace) -> int:
    if opts.command == "matrix":
        return cmd_matrix(opts)
    if opts.command == "stress":
        from harness.campaign.stress import run_stress

        return run_stress(opts)
    if opts.command == "replay":
        from harness.campaign.replay import cmd_replay

        return cmd_replay(opts)
    if opts.command == "diagnose":
        from harness.diagnosis.diagnose import cmd_diagnose

        return cmd_diagnose(opts)
    if opts.command == "show":
        from harness.analysis.show import cmd_show

        return cmd_show(opts)
    if opts.command == "shrink":
        from harness.campaign.shrink import cmd_shrink

        return cmd_shrink(opts)
    if opts.command == "report":
        return cmd_report(opts)
    if opts.command == "families":
        return cmd_families(opts)
    if opts.command == "run":
        return cmd_run(opts)
    if opts.command == "resign":
        return cmd_resign(opts)
    if opts.command == "retire":
        return cmd_retire(opts)
    if opts.command == "merge":
        return cmd_merge(opts)
    if opts.command == "pack":
        return cmd_pack(opts)
    if opts.command == "price":
        from harness.analysis.pricing import main as cmd_price

        return cmd_price(opts)
    if opts.command == "doctor":
        from harness.diagnosis.doctor import cmd_doctor

        return cmd_doctor(opts)
    if opts.command == "crosstab":
        from harness.analysis.crosstab import cmd_crosstab

        return cmd_crosstab(opts)
    raise UsageError(f"unknown command {opts.command!r}")


def matrix_from_options(opts: argparse.Namespace) -> MatrixSpec:
    spec = load_spec(opts.file) if opts.file else presets.get(opts.preset or presets.DEFAULT_PRESET)
    changes = {k: v for k, v in (("store", opts.store), ("workers", opts.workers), ("per_gpu", opts.per_gpu),
                                  ("max_failures", opts.max_failures), ("max_time_s", opts.max_time),
                                  ("finish_by_s", opts.finish_by),
                                  ("gpu_mem_gib", opts.pack_by_memory))
               if v is not None}
    if opts.cells:
        changes["only"] = tuple(comma_list(opts.cells))
    if opts.trials is not None:
        # The matrix default only: a group with its own count keeps it (gpu-campaign's eager
        # control stays at 10 while --trials 30 goes to the candidates; an H200 call spent 8 eager
        # trials past 10 before this).
        changes["trials"] = opts.trials
        if opts.every_group:
            # On gpu-bound eager is the fastest clean cell (REPORT.md, sixth session): the control
            # became a candidate and needs the 29 stressed trials of one (issue 5).
            changes["groups"] = tuple(dataclasses.replace(g, trials=None) for g in spec.groups)
    elif opts.every_group:
        raise UsageError("--every-group needs --trials")
    return dataclasses.replace(spec, **changes) if changes else spec


def cmd_matrix(opts: argparse.Namespace) -> int:
    from harness.analysis import report
    from harness.diagnosis import diagnose

    if opts.list:
        for name, make in presets.PRESETS.items():
            spec = make()
            cells = spec.cells()
            print(f"{name}: {len(cells)} cells, {sum(c.trials for c in cells)} trials, store {spec.store_dir}")
            for c in cells:
                print(f"  {c.name} x{c.trials}")
        return 0
    spec = matrix_from_options(opts)
    if opts.pending:
        _print_pending(spec, gpus=opts.gpus or 1)
        return 0
    done = run_matrix(spec, live=False if opts.no_live else None, num_gpus=opts.gpus)
    cells = report.summarize(done.records)
    findings = diagnose.diagnose(diagnose.from_records(done.records, spec.store_dir))
    if opts.json:
        print(json.dumps(report.summary_json(cells, matrix=spec.name, store=str(spec.store_dir), ran=done.ran,
                                             resumed=done.resumed, left=done.left,
                                             left_by_time=done.left_by_time,
                                             elapsed_s=round(done.elapsed_s, 3),
                                             diagnosis=[f.to_json() for f in findings]), indent=2))
    else:
        _print_matrix_table(done, cells)
        if findings:
            print("\n" + diagnose.render(findings, brief=True))
    return 1 if any(r.outcome is Outcome.HARNESS_ERROR for r in done.records) else 0


def _print_pending(spec, *, gpus: int = 1) -> None:
    """`--pending`: per cell stored/failures/next, then totals and a trial-seconds estimate (the
    cell's median stored duration, else the median over the whole store) to plan device time:
    summed, and packed as the pool would pack them on `gpus` GPUs (CellPlan.share)."""
    from harness.campaign import slots
    from harness.analysis import stats
    from harness.campaign.matrix import memory_peaks, pending_plan, pool_order
    from harness.stores.store import Store

    plans = pending_plan(spec, gpus=gpus)
    records = Store(spec.store_dir).load()
    fallback = stats.median_or_none([p.median_s for p in plans if p.median_s is not None])
    if fallback is None:   # cells not run yet (e.g. a --cells subset): the whole store's median
        fallback = stats.median_or_none([r.duration_s for r in records
                                         if r.duration_s is not None and r.matrix == spec.name])
    width = max((len(p.cell) for p in plans), default=4)
    print(f"{'cell':<{width}}  stored  failed  other  next")
    for p in plans:
        note = " (stopped by --max-failures)" if p.stopped else ""
        print(f"{p.cell:<{width}}  {p.stored:>6}  {p.failures:>6}  {p.other:>5}  {p.pending:>4}{note}")
    pending = sum(p.pending for p in plans)
    seconds = sum(p.pending * (p.median_s or fallback or 0.0) for p in plans)
    wall = sum(p.pending * (p.median_s or fallback or 0.0) * p.share for p in plans)
    stopped = sum(p.stopped for p in plans)
    estimate = (f"~{seconds / 60:.0f} trial-minutes at the stored medians, at least ~{wall / 60:.0f} minutes "
                f"of wall time packed as the spec packs them (workers {spec.workers}, per_gpu {spec.per_gpu}"
                f"{f', by memory peaks on {spec.gpu_mem_gib:g} GiB GPUs' if spec.gpu_mem_gib else ''} "
                f"on {gpus} GPU{'s' if gpus > 1 else ''})") if fallback else "no stored durations yet"
    print(f"{spec.name}: {len(plans)} cells, {sum(p.planned for p in plans)} planned trials, "
          f"{sum(p.stored + p.other for p in plans)} records stored, {pending} pending, {stopped} cells stopped; "
          f"{estimate}")
    if fallback and pending:
        # The bound above assumes perfect packing; the pool packs in order, with bounded backfill.
        key = pool_order([p.cell for p in plans])
        queued = sorted(((p, i) for p in plans for i in p.pending_indices), key=lambda pi: key(pi[0].cell, pi[1]))
        jobs = [slots.Job(seconds=p.median_s or fallback, need=p.gpus, weight=p.slots) for p, _ in queued]
        run = slots.strict_and_backfill(jobs, workers=spec.workers, num_gpus=gpus, per_gpu=spec.per_gpu)
        print(f"as the pool would run them (harness.campaign.slots.simulate, the stored medians): ~{run['backfill'] / 60:.0f} "
              f"minutes of wall time; in strict order ~{run['strict'] / 60:.0f}")
    for peak in memory_peaks(spec, records):
        print(f"GPU memory, {peak.line()}")


def _left_words(done: MatrixRun) -> str:
    """'N left (k by the failure rule, m not started before --max-time)': what ended them."""
    by_rule = done.left - done.left_by_time
    parts = [f"{by_rule} by the failure rule"] if by_rule else []
    clock = "before --max-time" + (" or to end by --finish-by" if done.spec.finish_by_s is not None else "")
    parts += [f"{done.left_by_time} not started {clock}"] if done.left_by_time else []
    return f"{done.left} left" + (f" ({', '.join(parts)})" if parts else "")


def _print_matrix_table(done: MatrixRun, cells) -> None:
    from harness.analysis import report
    from harness.campaign.progress import format_elapsed

    print(f"matrix {done.spec.name}: ran {done.ran} trials in {format_elapsed(done.elapsed_s)}, "
          f"{done.resumed} already in {done.spec.store_dir}, {_left_words(done)}")
    print(report.text_table(cells))
    sigs = report.signature_lines(cells)
    if sigs:
        print("\nsignatures:")
        for line in sigs:
            print(f"  {line}")
    sites = report.native_excerpts(done.records, done.spec.store_dir)
    if sites:
        print("\nnative crash sites (harness.trial.native; `python -m harness show TRIAL_ID` for one trial):")
        for x in sites:
            print(f"  {report.clip(x.summary, 80)}: {x.site} in {x.trials}/{x.of} (e.g. {x.trial_id})")
    errors = [r for r in done.records if r.outcome is Outcome.HARNESS_ERROR]
    for r in errors[:5]:
        print(f"harness error: {r.trial_id}: {r.detail}", file=sys.stderr)


def _stores(opts: argparse.Namespace, *, existing: bool = False) -> list[Path]:
    """--store folders, else every store under results/ (report, families, resign, pack); with
    `existing`, a --store folder that holds no store is bad input (one line) before any is read."""
    from harness.analysis import report
    from harness.stores.store import TRIALS_NAME

    stores = [Path(s) for s in opts.store] if opts.store else report.default_stores(Path("results"))
    if not stores:
        raise UsageError("no stores given and none found under results/")
    for store in stores if existing else ():
        if not (store / TRIALS_NAME).is_file():
            raise UsageError(f"no result store at {store} (no {TRIALS_NAME})")
    return stores


def cmd_report(opts: argparse.Namespace) -> int:
    from harness.analysis import report
    # The failure-modes overview sums every store: rebuilt only when no --store narrows the set.
    names = report.rebuild(_stores(opts), Path(opts.out), overview=not opts.store)
    print(f"wrote {opts.out}: {len(names)} block(s): {', '.join(names) or '-'}")
    return 0


def cmd_families(opts: argparse.Namespace) -> int:
    """REPORT's failure-modes table for the stores named (e.g. the trainer's stores without the
    repros'): retired records count, as there (their failures were observed)."""
    from harness.analysis import report
    from harness.stores.retire import with_retired
    from harness.stores.store import Store

    stores = _stores(opts, existing=True)
    rows, totals = report.family_table([(s, Store(s).load()) for s in with_retired(stores)])
    print("\n".join(rows))
    print(f"trials that count: {totals or 'none'}")
    return 0


def cmd_resign(opts: argparse.Namespace) -> int:
    from harness.stores.resign import resign_store

    from harness.stores.retire import with_retired

    stores = _stores(opts, existing=True)
    # Retired records too (harness retire): the report still counts their failures by family.
    for store in with_retired(stores):
        print(resign_store(store).line())
    return 0


def cmd_retire(opts: argparse.Namespace) -> int:
    from harness.stores.retire import RetireError, retire

    try:
        done = retire(opts.store, [g.strip() for g in opts.cells.split(",")], opts.reason)
    except RetireError as e:
        raise UsageError(str(e)) from None
    print(done.line())
    return 0


def cmd_pack(opts: argparse.Namespace) -> int:
    from harness.stores.zips import PackError, check, pack_store

    stores = _stores(opts)
    try:
        for store in stores:        # every store checked before any is packed: bad input writes nothing
            check(store)
    except PackError as e:
        raise UsageError(str(e)) from None
    for store in stores:
        for done in pack_store(store):
            print(done.line())
    return 0


def cmd_merge(opts: argparse.Namespace) -> int:
    from harness.stores.merge import MergeError, check, merge

    try:
        for src in opts.sources:
            check(src, opts.into)
        done = [merge(src, opts.into) for src in opts.sources]
    except MergeError as e:
        raise UsageError(str(e)) from None
    for d in done:
        print(d.line())
    return 0


def cmd_run(opts: argparse.Namespace) -> int:
    from harness.trial.runner import run_trial
    from harness.trial.spec import InvalidSpec, TrialSpec
    from harness.stores.store import safe_name

    try:
        text = Path(opts.spec).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read trial spec {opts.spec}: {e.strerror or e}") from None
    spec = TrialSpec.from_json(text)
    artefacts = Path(opts.artefacts) if opts.artefacts else Path("runs") / "trials" / safe_name(spec.trial_id)
    result = run_trial(spec, artefacts)
    print(json.dumps(result.to_json(), sort_keys=True))
    if result.outcome is Outcome.HARNESS_ERROR:
        raise InvalidSpec(result.detail)
    return 0 if result.outcome is Outcome.OK else 1
