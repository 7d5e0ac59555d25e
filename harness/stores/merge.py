"""Fold one result store into another (`python -m harness merge SRC --into DEST`).

Each H200 run brings back its whole store as the GPU host saw it. When a run starts before the
previous run's store has been unpacked here, the two come back holding the same older records
plus new trials under the same trial ids: ids are `matrix/cell/index` and the index is handed out
from what the store held, so both runs ran a `.../0` of the cells neither had. Unpacking the
second over the first then drops the first's new records and writes two trials' files into one
artefacts folder (docs/log/2026-11-30-store-merge.md). Stores from two machines meet the same way.

Rules: a source record that DEST already holds (same cell, start time and duration: the same run)
is skipped, so repeating a merge changes nothing. A record whose trial id DEST holds for another
run gets its cell's next free index; `plan_seed` stays as recorded (the schedule it ran under), and
its artefacts are copied under the new id's folder. A source's `retired/` records and reasons go
into DEST's `retired/` by the same rules.

Order of writes per record: artefacts copied (replacing a folder an interrupted merge left without
its record), then the record appended. An interruption leaves at most a folder without a record; a
rerun completes the merge.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.runtime.errors import UserInputError
from harness.stores.retire import REASONS_NAME, RETIRED_NAME
from harness.stores.store import (
    ARTEFACTS_NAME,
    TRIALS_NAME,
    PackedArtefacts,
    Store,
    StoreError,
    done_ids,
    packed_path,
    safe_name,
)
from harness.stores.zips import unpack_into
from harness.trial.folder import RESULT, SPEC
from harness.trial.outcome import Outcome, TrialResult


class MergeError(UserInputError):
    """Bad input to merge: one line, nothing written."""


@dataclass(kw_only=True, slots=True)
class Merged:
    source: Path
    dest: Path
    added: int = 0
    renumbered: int = 0
    present: int = 0
    retired: int = 0
    repeated_seeds: int = 0
    """Added counted records whose scheduler seed their cell already held in a counted record
    under another trial id."""

    def line(self) -> str:
        # Said only when it happens: two copies that each ran a cell's next trials ran the same
        # schedules (seed + index, harness.campaign.matrix.expand), so the cell sampled fewer than its n says.
        repeated = (
            (
                f"; {self.repeated_seeds} of them repeat a scheduler seed their cell already held "
                f"(the same fault plan run again)"
            )
            if self.repeated_seeds
            else ""
        )
        return (
            f"{self.source} -> {self.dest}: {self.added} records added ({self.renumbered} under a new "
            f"trial index), {self.present} already there, {self.retired} retired records added{repeated}"
        )


def _run_key(r: TrialResult) -> tuple:
    return (r.cell, r.started_at, r.duration_s)


def check(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> tuple[list[TrialResult], list[TrialResult]]:
    """MergeError if `source` cannot be merged into `dest`; reads only (the CLI checks every source
    before merging any). Returns the records of both, as read."""
    src_root, dest_root = Path(source), Path(dest)
    if not (src_root / TRIALS_NAME).is_file():
        raise MergeError(f"no result store at {src_root} (no {TRIALS_NAME})")
    if dest_root.exists() and not dest_root.is_dir():
        raise MergeError(f"{dest_root} is not a directory")
    if dest_root.is_dir() and src_root.resolve() == dest_root.resolve():
        raise MergeError(f"{src_root} is the store it would be merged into")
    records, held = Store(src_root).load(), Store(dest_root).load()
    _check_same_matrix(records, held, src_root, dest_root)
    return records, held


def merge(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Merged:
    records, held = check(source, dest)
    src_root, dest_root = Path(source), Path(dest)
    done = Merged(source=src_root, dest=dest_root)
    _fold(Store(src_root), Store(dest_root), records, held, done)
    src_retired = Store(src_root / RETIRED_NAME)
    if src_retired.trials_path.is_file():
        counts = Merged(source=src_retired.root, dest=dest_root / RETIRED_NAME)
        into_retired = Store(dest_root / RETIRED_NAME)
        _fold(src_retired, into_retired, src_retired.load(), into_retired.load(), counts)
        done.retired = counts.added
        _merge_reasons(src_retired.root / REASONS_NAME, into_retired.root / REASONS_NAME)
    return done


def _check_same_matrix(records: list[TrialResult], held: list[TrialResult], src: Path, dest: Path) -> None:
    theirs, ours = {r.matrix for r in records}, {r.matrix for r in held}
    if theirs and ours and not theirs <= ours:
        raise MergeError(
            f"{src} holds matrix {', '.join(sorted(theirs - ours))}, {dest} holds "
            f"{', '.join(sorted(ours))}: merging them would mix two experiments"
        )


def _fold(src: Store, into: Store, records: list[TrialResult], held: list[TrialResult], done: Merged) -> None:
    seen = {_run_key(r) for r in held}
    # An id is held when a counted record has it (`store.done_ids`: an out-of-memory record
    # leaves its id open for the retry, which is stored under the same id with an `-attempt<n>`
    # folder), or when its folder is: a retry from another copy joins an OOM record unless that
    # copy's attempt folder is already here.
    held_ids = done_ids(held)
    folders = {Path(r.artefacts).name for r in held if r.artefacts}
    # A new index avoids the source's own ids as well, so that a source record that clashes with
    # nothing keeps its id.
    taken = {r.trial_id for r in held} | {r.trial_id for r in records}
    # (matrix, cell, seed) -> ids of counted trials that ran it. A record that does not count (out
    # of memory, timeout, harness error) is rerun under its own id and seed on purpose: no repeat.
    seeds: dict[tuple[str, str, int], set[str]] = {}
    for r in held:
        if r.plan_seed is not None and r.outcome.counts_as_trial:
            seeds.setdefault((r.matrix, r.cell, r.plan_seed), set()).add(r.trial_id)
    for record in records:
        if _run_key(record) in seen:
            done.present += 1
            continue
        new = record
        if record.trial_id in held_ids or (record.artefacts and Path(record.artefacts).name in folders):
            new = _renumbered(record, taken)
            done.renumbered += 1
        new = _copy_artefacts(src, into, record, new)
        into.append(new)
        if new.plan_seed is not None and new.outcome.counts_as_trial:
            ran = seeds.setdefault((new.matrix, new.cell, new.plan_seed), set())
            done.repeated_seeds += bool(ran - {new.trial_id})
            ran.add(new.trial_id)
        seen.add(_run_key(new))
        if new.outcome is not Outcome.RESOURCE:
            held_ids.add(new.trial_id)
        if new.artefacts:
            folders.add(Path(new.artefacts).name)
        taken.add(new.trial_id)
        done.added += 1


def _renumbered(record: TrialResult, taken: set[str]) -> TrialResult:
    prefix, _, index = record.trial_id.rpartition("/")
    if not prefix or not index.isdigit():
        raise MergeError(f"trial id {record.trial_id!r} is held by another run and does not end in /<index>")
    n = record.trial_index + 1
    while f"{prefix}/{n}" in taken:
        n += 1
    return dataclasses.replace(record, trial_id=f"{prefix}/{n}", trial_index=n)


def _copy_artefacts(src: Store, into: Store, old: TrialResult, new: TrialResult) -> TrialResult:
    folder = src.artefacts_of(old)
    if folder is None or not folder.is_dir():
        return new
    # A renumbered record is its new id's first: no `-attempt<n>` suffix, so that a later retry
    # of it (Store.artefacts_dir, attempt 1) cannot land in its folder.
    name = Path(old.artefacts).name if new.trial_id == old.trial_id else safe_name(new.trial_id)
    target = into.root / ARTEFACTS_NAME / name
    try:
        if target.exists():
            shutil.rmtree(target)
        packed_path(target).unlink(missing_ok=True)  # never read beside a folder
        if isinstance(folder, PackedArtefacts):  # a packed source (harness.stores.zips): copied as a folder
            unpack_into(folder, target)
        else:
            shutil.copytree(folder, target)
        if new.trial_id != old.trial_id:
            _rename_inside(target, new)
    except OSError as exc:
        raise StoreError(f"cannot copy {folder} to {target}: {exc.strerror or exc}") from None
    return dataclasses.replace(new, artefacts=str(Path(old.artefacts).parent / name))


def _rename_inside(folder: Path, new: TrialResult) -> None:
    """The trial's own id in the copied spec.json and result.json (replay reads the spec), so
    that a renumbered trial does not replay or show under the id of the run it clashed with. The
    paths inside (its old artefacts folder as `train.out_dir`) stay: they say where it ran."""
    for name in (SPEC, RESULT):
        path = folder / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "trial_id" in data:
            data.update(trial_id=new.trial_id, trial_index=new.trial_index)
            path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _merge_reasons(src: Path, dest: Path) -> None:
    if not src.is_file():
        return
    have = set(dest.read_text(encoding="utf-8").splitlines()) if dest.is_file() else set()
    new = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip() and line not in have]
    if new:
        json.loads(new[0])  # a reasons file that is not ours fails here, before anything is written
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in new))
