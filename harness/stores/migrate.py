"""Write the fields a record gained since it was stored into its store: today the cell's parts
(`workload`, `strategy`, `fixes`, `plan`), which records before 2026-12-03 lacked.

Loading already fills them (`TrialResult.__post_init__`); migrating writes them to disk, so that
a store read by another tool, or by `jq`, says what ran without splitting cell names. Only the
missing fields are added: a key this version does not know stays as it was. Atomic per store
(`write_atomic`), and a no-op on a store whose records all have them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.stores.store import Store, StoreError, write_atomic
from harness.trial.outcome import TrialResult

FIELDS = ("workload", "strategy", "fixes", "plan")


@dataclass(frozen=True, slots=True)
class Migrated:
    store: Path
    records: int
    filled: int

    def line(self) -> str:
        if not self.filled:
            return f"{self.store}: {self.records} records, all up to date"
        return f"{self.store}: {self.filled} of {self.records} records given {', '.join(FIELDS)}"


def migrate_store(store_dir: Path) -> Migrated:
    store = Store(store_dir)
    if not store.trials_path.is_file():
        return Migrated(store_dir, 0, 0)
    store.load()  # the store's own checks: a damaged line is one error, nothing written
    text = store.trials_path.read_text(encoding="ascii")
    records = [json.loads(line) for line in text.split("\n")[:-1]]  # a torn tail is left out, as load() does
    filled = 0
    for d in records:
        missing = [f for f in FIELDS if d.get(f) is None]
        if missing:
            parts = TrialResult.from_json(d)
            d.update({f: getattr(parts, f) for f in missing})
            filled += 1
    if filled:
        data = "".join(json.dumps(d, sort_keys=True, ensure_ascii=True) + "\n" for d in records)
        try:
            write_atomic(store.trials_path, data.encode("ascii"))
        except OSError as exc:
            raise StoreError(f"{store.trials_path}: cannot rewrite: {exc.strerror}") from None
    return Migrated(store_dir, len(records), filled)
