"""Take a store's records of some cells out of the count (`python -m harness retire`).

When the workload changes under a store (the trainer gains a compiler workaround, a repro is
fixed), the records its cells hold describe the old workload: counted beside new trials they
would mix two experiments into one k/n, and the matrix's stop rule would never rerun a cell that
failed before the change. Retiring moves those records, with their artefacts, into the store's
`retired/` folder (itself a store, so `harness show` and `replay --store <store>/retired` still
read them) and appends why to `retired/reasons.jsonl`; the cells are then pending again. The
report counts retired failures in its failure-modes table (they were observed) and names them in
the store's block, never in its k/n.

Order of writes: artefacts moved, records appended to `retired/`, reason appended, then the
store rewritten atomically. An interruption before the rewrite leaves a record in both; a rerun
of the same command skips records already retired, so it completes the move.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.runtime.errors import UserInputError
from harness.stores.store import ARTEFACTS_NAME, TRIALS_NAME, PackedArtefacts, Store, StoreError, packed_path
from harness.trial.outcome import TrialResult

RETIRED_NAME = "retired"
REASONS_NAME = "reasons.jsonl"


class RetireError(UserInputError):
    """Bad input to retire: one line, nothing moved."""


@dataclass(kw_only=True, slots=True)
class Retired:
    store: Path
    records: int
    cells: int

    def line(self) -> str:
        return (
            f"{self.store}: retired {self.records} records of {self.cells} cells to "
            f"{self.store / RETIRED_NAME}; those cells are pending again"
        )


def retired_store(store_dir: str | os.PathLike[str]) -> Store:
    return Store(Path(store_dir) / RETIRED_NAME)


def with_retired(store_dirs: Sequence[Path]) -> list[Path]:
    """The stores, then the retired stores they hold (show, resign): a rerun reuses a retired
    record's trial id, so the live record is found first."""
    return [*store_dirs, *(d / RETIRED_NAME for d in store_dirs if (d / RETIRED_NAME / TRIALS_NAME).is_file())]


def reasons(store_dir: str | os.PathLike[str]) -> list[dict]:
    """The `reasons.jsonl` entries of a store's retired records, oldest first."""
    path = Path(store_dir) / RETIRED_NAME / REASONS_NAME
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def retire(
    store_dir: str | os.PathLike[str], globs: Sequence[str], reason: str, *, now: datetime.datetime | None = None
) -> Retired:
    root = Path(store_dir)
    if not (root / TRIALS_NAME).is_file():
        raise RetireError(f"no result store at {root} (no trials.jsonl)")
    if not reason.strip():
        raise RetireError("--reason must say why these records stop counting")
    if not globs or not all(g.strip() for g in globs):
        raise RetireError("--cells needs at least one non-empty glob")
    store = Store(root)
    records = store.load()
    matched = [any(fnmatch.fnmatchcase(r.cell, g) for g in globs) for r in records]
    moving = [r for r, m in zip(records, matched) if m]
    if not moving:
        raise RetireError(f"no stored record of {root} has a cell matching {', '.join(globs)}")
    dest = retired_store(root)
    done = {(r.trial_id, r.started_at) for r in dest.load()}
    for record in moving:
        if (record.trial_id, record.started_at) in done:
            continue
        dest.append(_move_artefacts(store, dest, record))
    entry = {
        "at": (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="seconds"),
        "cells": list(globs),
        "records": len(moving),
        "reason": reason.strip(),
    }
    with open(dest.root / REASONS_NAME, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    store.rewrite([r for r, m in zip(records, matched) if not m])
    return Retired(store=root, records=len(moving), cells=len({r.cell for r in moving}))


def _move_artefacts(store: Store, dest: Store, record: TrialResult) -> TrialResult:
    """The record with its artefacts folder moved under `dest` (a fresh name if a record of the
    same trial id was retired before: a cell retired twice keeps both)."""
    art = store.artefacts_of(record)
    if art is None or not art.is_dir():
        return record
    # A packed trial (harness.stores.zips) moves as its zip, under the name its folder would have had,
    # and with it the folder the zip may have beside it (the trainer's run/, a stopped pack).
    name = Path(record.artefacts).name
    folder = store.root / ARTEFACTS_NAME / name
    target_dir = dest.root / ARTEFACTS_NAME
    target_dir.mkdir(parents=True, exist_ok=True)
    target, n = target_dir / name, 1
    while target.exists() or packed_path(target).exists():
        n += 1
        target = target_dir / f"{name}-retired{n}"
    moves = [(folder, target)] if folder.is_dir() else []
    if isinstance(art, PackedArtefacts):
        moves.append((art.file, packed_path(target)))
    for src, to in moves:
        try:
            shutil.move(str(src), str(to))
        except OSError as exc:
            raise StoreError(f"cannot move {src} to {to}: {exc.strerror or exc}") from None
    prefix = Path(record.artefacts).parent.parent  # the store as the record named it
    return dataclasses.replace(record, artefacts=str(prefix / RETIRED_NAME / ARTEFACTS_NAME / target.name))
