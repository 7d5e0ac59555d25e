"""`python -m dflash plan`: one epoch's batch plan of a preset, bucket by bucket, beside the seeds'.

The plan is `dflash.buckets.plan_epoch` over a length index and nothing else: the shipped
synthetic index (`dflash.lengths`), a `.npy` of lengths, or a tokenized dataset whose lengths come
from its list offsets (no token is read, so a large corpus plans in the time its offsets take).
Every row of a dataset is planned: dropping rows with too few supervised tokens, as training
does, would need the loss masks.

Per bucket it prints the bounds as the seeds wrote theirs (`[lo, hi)`), batches, share of the
batches, and the smallest, largest and average batch; then the totals. Beside them stand the
seeds' logged figures (`dflash.seeds`) and the distance, this plan minus theirs, on each figure
their log gave; a figure they did not log is `-`. Per-bucket figures are compared only where the
buckets are the seeds' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dflash.buckets import plan_epoch
from dflash.config import RunConfig
from dflash.lengths import (
    BUDGET_QUANTUM,
    LOG_MU,
    LOG_SIGMA,
    MAX_LENGTH,
    SHIPPED_BUCKET_SAMPLES,
    SHIPPED_SEED,
    read_lengths,
    shipped_lengths,
)
from dflash.presets import SEEDS_TOKEN_BUDGET
from dflash.seeds import SEEDS


@dataclass(frozen=True, slots=True)
class Sizes:
    batches: int
    min: int | None
    max: int | None
    avg: float | None

    @classmethod
    def of(cls, sizes: Sequence[int]) -> Sizes:
        if not sizes:
            return cls(batches=0, min=None, max=None, avg=None)
        return cls(batches=len(sizes), min=min(sizes), max=max(sizes), avg=sum(sizes) / len(sizes))


@dataclass(frozen=True, slots=True)
class PlanTable:
    bounds: tuple[tuple[int, int], ...]
    """Per bucket [lo, hi): the lengths it holds."""
    buckets: tuple[Sizes, ...]
    total: Sizes
    samples: int

    def share_pct(self, b: int) -> float:
        return 100.0 * self.buckets[b].batches / self.total.batches if self.total.batches else 0.0


def half_open(boundaries: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Inclusive upper bounds -> [lo, hi) per bucket, the first from 0, as the seeds wrote theirs."""
    his = [b + 1 for b in boundaries]
    return tuple(zip([0, *his[:-1]], his, strict=True))


def plan_table(lengths: np.ndarray, cfg: RunConfig, seed: int, epoch: int) -> PlanTable:
    d = cfg.data
    plan = plan_epoch(
        lengths, d.bucket_boundaries, d.token_budget, seed, epoch, batching=d.batching, max_batch_rows=d.max_batch_rows
    )
    per = {bound: [] for bound in d.bucket_boundaries}
    for batch in plan:
        per[batch.bucket].append(len(batch.indices))
    return PlanTable(
        bounds=half_open(d.bucket_boundaries),
        buckets=tuple(Sizes.of(per[bound]) for bound in d.bucket_boundaries),
        total=Sizes.of([len(b.indices) for b in plan]),
        samples=len(lengths),
    )


def _n(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _d(mine: float | None, theirs: Sequence[float], digits: int = 0) -> str:
    """Distance mine - theirs, one per logged launch ('-' when either side is missing)."""
    if mine is None or not theirs:
        return "-"
    return " / ".join(f"{mine - t:+,.{digits}f}" for t in theirs)


def _launches(values: Sequence[float], digits: int = 0) -> str:
    return " / ".join(f"{v:,.{digits}f}" for v in values) if values else "-"


def source_line(path: str | None, lengths: np.ndarray) -> str:
    if path is None:
        return (
            f"lengths: the shipped synthetic index (dflash.lengths), {len(lengths):,} lengths: "
            f"round(exp(N({LOG_MU:.3f}, {LOG_SIGMA:.3f}^2))) truncated to each bucket up to "
            f"{MAX_LENGTH}, {'/'.join(f'{n:,}' for n in SHIPPED_BUCKET_SAMPLES)} samples per seeds' "
            f"bucket (fitted to their batch shares and count: those two are matched, not checked), "
            f"generator seed {SHIPPED_SEED}"
        )
    return f"lengths: {path}, {len(lengths):,} rows (all planned; plan reads no token)"


def budget_line(cfg: RunConfig, shipped: bool) -> str:
    d = cfg.data
    if d.batching == "fixed":
        return (
            f"token budget: {d.token_budget:,} padded tokens a batch (data.token_budget); "
            f"batch size per bucket = budget // bound"
        )
    line = (
        f"token budget: {d.token_budget:,} real tokens a batch, at most {d.max_batch_rows} rows "
        f"(data.token_budget, data.max_batch_rows)"
    )
    if shipped and d.token_budget == SEEDS_TOKEN_BUDGET and d.bucket_boundaries == SEEDS.bucket_boundaries():
        line += (
            f"; chosen as the multiple of {BUDGET_QUANTUM} whose seed-0 epoch-0 plan of the shipped "
            f"index averages nearest the seeds' {SEEDS.avg_batch} samples a batch "
            f"(dflash.lengths.calibrate_budget)"
        )
    return line


def render(table: PlanTable, cfg: RunConfig, *, seed: int, epoch: int, source: str, budget: str) -> str:
    d = cfg.data
    theirs = d.bucket_boundaries == SEEDS.bucket_boundaries()
    out = [f"plan: preset {cfg.preset}, batching {d.batching}, shuffle seed {seed}, epoch {epoch}", source, budget, ""]
    head = (
        f"{'bucket':<14} {'batches':>8} {'share%':>6} {'min':>4} {'max':>4} {'avg':>6} | "
        f"{'seeds: batches':>16} {'share%':>6} | {'distance: batches':>18} {'share%':>6}"
    )
    out += [head, "-" * len(head)]
    last = len(table.buckets) - 1
    for b, ((lo, hi), s) in enumerate(zip(table.bounds, table.buckets, strict=True)):
        mine = (
            f"{f'[{lo},{hi})':<14} {s.batches:>8,} {table.share_pct(b):>6.1f} {_n(s.min):>4} {_n(s.max):>4} "
            f"{_f(s.avg):>6}"
        )
        if theirs:
            logged = SEEDS.last_bucket_batches if b == last else ()
            seeds_cols = f"{_launches(logged):>16} {SEEDS.share_pct[b]:>6.1f}"
            dist = f"{_d(s.batches, logged):>18} {table.share_pct(b) - SEEDS.share_pct[b]:>+6.1f}"
        else:
            seeds_cols, dist = f"{'-':>16} {'-':>6}", f"{'-':>18} {'-':>6}"
        out.append(f"{mine} | {seeds_cols} | {dist}")
    if not theirs:
        out.append(
            "(the seeds' buckets are "
            + " ".join(f"[{lo},{hi})" for lo, hi in half_open(SEEDS.bucket_boundaries()))
            + ": per-bucket figures not compared)"
        )
    t = table.total
    out += ["", f"{'total':<14} {'this plan':>12} | {'seeds':>12} | {'distance':>14}", "-" * 61]
    rows = [
        ("samples", _n(table.samples), _launches([SEEDS.samples]), _d(table.samples, [SEEDS.samples])),
        ("batches", _n(t.batches), _launches([SEEDS.batches]), _d(t.batches, [SEEDS.batches])),
        ("min batch", _n(t.min), _launches(SEEDS.min_batch), _d(t.min, SEEDS.min_batch)),
        ("max batch", _n(t.max), _launches([SEEDS.max_batch]), _d(t.max, [SEEDS.max_batch])),
        ("avg batch", _f(t.avg, 2), _launches([SEEDS.avg_batch], 1), _d(t.avg, [SEEDS.avg_batch], 2)),
    ]
    out += [f"{name:<14} {mine:>12} | {seeds:>12} | {dist:>14}" for name, mine, seeds, dist in rows]
    return "\n".join(out)


def run(cfg: RunConfig, *, lengths_path: str | None, seed: int, epoch: int) -> str:
    """The plan command's text. `lengths_path` None = data.path when the preset names one, else
    the shipped index."""
    path = lengths_path or cfg.data.path
    lengths = shipped_lengths() if path is None else read_lengths(path)
    table = plan_table(lengths, cfg, seed, epoch)
    return render(
        table,
        cfg,
        seed=seed,
        epoch=epoch,
        source=source_line(path, lengths),
        budget=budget_line(cfg, shipped=path is None),
    )
