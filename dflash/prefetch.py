"""Prefetch stage: K threads `dflash-prefetch-k` turn the epoch plans into `TokenBatch`es.

The global batch number `seq` runs epoch-major over `buckets.plan_epoch` plans (epoch e's plan
is a pure function of (shuffle_seed, e)), so every thread agrees on what batch `seq` is. Thread
k produces seq k, k+K, k+2K, ... from `start_seq` up to `end_seq`, reading rows lazily from the
memory-mapped dataset; epochs continue until the step budget is consumed. The last thread to
finish closes the output channel.
"""

from __future__ import annotations

import threading

import numpy as np

from dflash.buckets import Batch, max_rows, plan_epoch
from dflash.channel import Channel
from dflash.collate import collate
from dflash.config import DataConfig
from dflash.data import TokenDataset
from dflash.heartbeat import beat
from dflash.metrics import Metrics
from harness.runtime.failpoints import fault_point

STAGE = "prefetch"


class EpochPlanner:
    """seq -> (epoch, Batch), computing epoch plans lazily; safe to share between threads."""

    def __init__(self, lengths: np.ndarray, cfg: DataConfig) -> None:
        self._lengths = lengths
        self._cfg = cfg
        self._lock = threading.Lock()
        self._plans: dict[int, list[Batch]] = {}
        self._starts: list[int] = [0]  # _starts[e] = seq of epoch e's first batch

    def _plan(self, epoch: int) -> list[Batch]:
        plan = self._plans.get(epoch)
        if plan is None:
            c = self._cfg
            plan = plan_epoch(
                self._lengths,
                c.bucket_boundaries,
                c.token_budget,
                c.shuffle_seed,
                epoch,
                batching=c.batching,
                max_batch_rows=c.max_batch_rows,
            )
            if not plan:
                raise ValueError("epoch plan is empty: no training rows")
            self._plans[epoch] = plan
            for old in [e for e in self._plans if e < epoch - 2]:
                del self._plans[old]  # threads are at most a few batches apart
        return plan

    def get(self, seq: int) -> tuple[int, Batch]:
        with self._lock:
            epoch = 0
            while True:
                if epoch + 1 >= len(self._starts):
                    self._starts.append(self._starts[epoch] + len(self._plan(epoch)))
                if seq < self._starts[epoch + 1]:
                    return epoch, self._plan(epoch)[seq - self._starts[epoch]]
                epoch += 1

    def max_rows(self) -> int:
        """The most rows a batch of any epoch can have: what one-shape runs pad to."""
        c = self._cfg
        return max_rows(c.bucket_boundaries, c.token_budget, c.batching, c.max_batch_rows)

    def shapes(self, pad_to: int | None = None, pad_rows: int | None = None) -> list[tuple[int, int]]:
        """Distinct (rows, length) batch shapes of epoch 0. Under batching=fixed every epoch has
        the same ones; under token-budget a later epoch may add row counts."""
        with self._lock:
            plan = self._plan(0)
        return sorted({(pad_rows or len(b.indices), pad_to or b.bucket) for b in plan})


class BatchPrefetcher:
    def __init__(
        self,
        *,
        ds: TokenDataset,
        planner: EpochPlanner,
        out: Channel,
        num_threads: int,
        start_seq: int,
        end_seq: int,
        gate,
        metrics: Metrics,
        pad_to: int | None = None,
        pad_rows: int | None = None,
    ) -> None:
        self.ds = ds
        self.planner = planner
        self.out = out
        self.num_threads = num_threads
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.gate = gate
        self.metrics = metrics
        self.pad_to, self.pad_rows = pad_to, pad_rows
        self._live = num_threads
        self._live_lock = threading.Lock()

    def seqs(self, k: int) -> range:
        first = self.start_seq + (k - self.start_seq) % self.num_threads
        return range(first, self.end_seq, self.num_threads)

    def run(self, k: int) -> None:
        """Body of thread dflash-prefetch-k."""
        try:
            self.gate.wait()
            for seq in self.seqs(k):
                with self.metrics.busy(STAGE):
                    epoch, batch = self.planner.get(seq)
                    tb = collate(self.ds, batch, seq, epoch, pad_to=self.pad_to, pad_rows=self.pad_rows)
                fault_point("prefetch.before_put")
                self.out.put(tb)
                beat()
                fault_point("prefetch.after_put")
        finally:
            with self._live_lock:
                self._live -= 1
                last = self._live == 0
            if last:
                self.out.close()
