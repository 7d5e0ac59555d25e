"""What each H200 run added to a store: the figures the log (docs/log/) quotes per run.

    python -m tools.run_trials N [N ...] [--store STORE] [--logs DIR] [--all] [--seeds]

A run's trials are the store's records that started inside its window: from the timestamp on
the first line of results/h200-campaign/run<N>-log.txt until its `== done after S s` line (or
the budget the first line names, if the run was cut before it; the next run can start inside the
last one's budget, so the budget alone would take trials of the next). Per run: trials,
trial-seconds (the sum of durations: with the wall time, how many ran at once), outcomes,
failure families, the median time to an F1 failure (what a warm Inductor cache shortens), the hang
trials' durations and GPU memory, the runner's nvidia-smi sample against the workload's own
allocator peak (per run, and over all the runs named when there are several), and each passing
trial's tokens/s, GPU memory and duration (`--all`: every trial's). Also the size of the Inductor
cache the run found (tools/h200_run.sh's `du -sh .cache` line): 3 MB is a cold machine.
`--seeds`: over the runs named, each stressed cell's trials and how many distinct scheduler seeds
they ran under (runs started from a store without the last run's trials hand out the same seeds
again).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import re
import statistics
import sys
from pathlib import Path

from harness.diagnosis.families import family
from harness.stores.store import Store, StoreError
from harness.trial.outcome import Outcome, TrialResult

# The defaults are the checkout's data, found from this file so that they do not depend on the
# folder the command runs in.
ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "results" / "h200-campaign"
STORE = ROOT / "results" / "gpu-campaign"
HEAD = re.compile(r"^== (\S+Z) budget (\d+) ")
CACHE = re.compile(r"^(\S+)\s+\.cache$", re.M)
DONE = re.compile(r"^== done after (\d+)s$", re.M)


class RunError(Exception):
    """Bad input: one line, exit 2."""


def window(n: int, logs: Path = LOGS) -> tuple[dt.datetime, dt.datetime, str]:
    """(start, end, cache size) of run n, from its log."""
    log = logs / f"run{n}-log.txt"
    try:
        text = log.read_text(errors="replace")
    except OSError as e:
        raise RunError(f"no log for run {n}: {log} ({e.strerror})") from e
    m = HEAD.match(text)
    start = _when(m.group(1).replace("Z", "+00:00")) if m else None
    if start is None:
        raise RunError(f"{log}: the first line is not h200_run.sh's '== TIME budget S phases ...'")
    cache, done = CACHE.search(text), DONE.search(text)
    seconds = int(done.group(1) if done else m.group(2))
    return start, start + dt.timedelta(seconds=seconds), cache.group(1) if cache else "?"


def _when(stamp: str) -> dt.datetime | None:
    """An ISO time with its UTC offset (what h200_run.sh and the runner write), else None."""
    try:
        t = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def in_window(records: list[TrialResult], start: dt.datetime, end: dt.datetime) -> list[TrialResult]:
    mine = []
    for r in records:
        if not r.started_at:
            continue
        t = _when(r.started_at)
        if t is None:
            raise RunError(f"{r.trial_id}: started_at {r.started_at!r} is not an ISO time with its offset")
        if start <= t < end:
            mine.append(r)
    return mine


def trial_line(r: TrialResult) -> str:
    mem = f"{r.gpu_mem_gib:.1f} GiB" if r.gpu_mem_gib is not None else "- GiB"
    tok = f"{r.tokens_per_s:,.0f} tokens/s" if r.tokens_per_s is not None else "- tokens/s"
    what = r.outcome.value + (f" ({family(r.signature_summary)})" if r.outcome.is_failure else "")
    return f"  {what} {r.trial_id}: {tok}, {mem}, {r.duration_s:.1f} s"


def memory_line(rs: list[TrialResult], label: str) -> str:
    """The runner's sampled GPU memory (every 2 s, what the trial's processes held) against the
    workload's allocator peak: the sample adds the CUDA context and cuBLAS workspaces, and can miss
    a short peak (docs/log/2026-12-01-runner-gpu-memory-samples.md)."""
    sampled = sum(r.gpu_mem_gib is not None for r in rs)
    diffs = sorted(
        r.gpu_mem_gib - r.reported_gpu_peak_gib
        for r in rs
        if r.gpu_mem_gib is not None and r.reported_gpu_peak_gib is not None
    )
    line = f"{label}: sampled in {sampled} of {len(rs)} trials"
    if diffs:
        line += (
            f"; sample minus allocator peak over the {len(diffs)} with both: median "
            f"{statistics.median(diffs):+.2f} GiB, {diffs[0]:+.2f} to {diffs[-1]:+.2f}"
        )
    return line


def seed_lines(rs: list[TrialResult]) -> list[str]:
    """Per cell that ran under a fault plan: its trials and their distinct plan seeds."""
    seeds: dict[str, list[int]] = collections.defaultdict(list)
    for r in rs:
        if r.plan_seed is not None:
            seeds[r.cell].append(r.plan_seed)
    return [f"  {cell}: {len(s)} trials, {len(set(s))} distinct scheduler seeds" for cell, s in sorted(seeds.items())]


def describe(n: int, rs: list[TrialResult], cache: str, every: bool = False) -> list[str]:
    """The run's figures; its passing trials one by one, or with `every` all of its trials."""
    failed = [r for r in rs if r.outcome.is_failure]
    lines = [
        f"run {n}: {len(rs)} trials, {sum(r.duration_s for r in rs):,.0f} trial-seconds; Inductor cache at "
        f"the start {cache}"
    ]
    outcomes = collections.Counter(r.outcome.value for r in rs)
    lines.append("  outcomes: " + (", ".join(f"{k} {v}" for k, v in outcomes.most_common()) or "-"))
    fams = collections.Counter(family(r.signature_summary) for r in failed)
    lines.append("  families: " + (", ".join(f"{k} {v}" for k, v in fams.most_common()) or "-"))
    f1 = [r.time_to_failure_s or r.duration_s for r in failed if family(r.signature_summary) == "F1"]
    if f1:
        lines.append(
            f"  F1 time to failure: median {statistics.median(f1):.1f} s over {len(f1)}, {min(f1):.1f}-{max(f1):.1f} s"
        )
    hangs = [r for r in rs if r.outcome is Outcome.HANG]
    if hangs:
        ran = sorted(r.duration_s for r in hangs)
        held = sorted(r.gpu_mem_gib for r in hangs if r.gpu_mem_gib is not None)
        lines.append(
            f"  hangs ran {ran[0]:.1f}-{ran[-1]:.1f} s ({len(ran)})"
            + (f", held {', '.join(f'{g:.1f}' for g in held)} GiB (sampled)" if held else "")
        )
    lines.append("  " + memory_line(rs, "memory"))
    lines += [
        trial_line(r) for r in sorted(rs, key=lambda r: (r.cell, r.trial_index)) if every or r.outcome is Outcome.OK
    ]
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.run_trials", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=int, metavar="N")
    ap.add_argument("--store", default=STORE, type=Path)
    ap.add_argument("--logs", default=LOGS, type=Path, help="where the run<N>-log.txt files are")
    ap.add_argument("--all", action="store_true", help="a line for every trial, not only the passing ones")
    ap.add_argument("--seeds", action="store_true", help="per stressed cell, its trials' distinct scheduler seeds")
    args = ap.parse_args(argv)
    try:
        if not (args.store / "trials.jsonl").is_file():
            raise RunError(f"no result store at {args.store}")
        windows = [(n, *window(n, args.logs)) for n in args.runs]
        records = Store(args.store).load()
        runs = [(n, in_window(records, start, end), cache) for n, start, end, cache in windows]
    except (RunError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for n, rs, cache in runs:
        print("\n".join(describe(n, rs, cache, args.all)))
    if len(runs) > 1:
        print(
            memory_line(
                [r for _, rs, _ in runs for r in rs],
                "runs " + ", ".join(str(n) for n, _, _ in runs) + " together, memory",
            )
        )
    if args.seeds:
        print("scheduler seeds, runs " + ", ".join(str(n) for n, _, _ in runs) + ":")
        print("\n".join(seed_lines([r for _, rs, _ in runs for r in rs])) or "  -")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
