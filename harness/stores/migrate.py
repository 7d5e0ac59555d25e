"""Write the fields a record gained since it was stored into its store: today the cell's parts
(`workload`, `strategy`, `fixes`, `plan`), which records before 2026-12-03 lacked, and each run's
`spec.json` in the current format (format 1 said a command's `--fix none` in its environment;
format 2 says it in `fixes`, with None for a program run as it is).

Loading already fills them (`TrialResult.__post_init__`); migrating writes them to disk, so that
a store read by another tool, or by `jq`, says what ran without splitting cell names. Only the
missing fields are added: a key this version does not know stays as it was. Atomic per store
(`write_atomic`), and a no-op on a store whose records all have them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.stores.store import ARTEFACTS_NAME, Store, StoreError, write_atomic
from harness.trial import folder
from harness.trial.outcome import TrialResult
from harness.trial.spec import FORMAT, InvalidSpec, TrialSpec

FIELDS = ("workload", "strategy", "fixes", "plan")


@dataclass(frozen=True, slots=True)
class Migrated:
    store: Path
    records: int
    filled: int
    specs: int = 0
    """spec.json files rewritten in the current format."""

    def line(self) -> str:
        specs = f"; {self.specs} spec.json files rewritten in format {FORMAT}" if self.specs else ""
        if not self.filled:
            return f"{self.store}: {self.records} records, all up to date{specs}"
        return f"{self.store}: {self.filled} of {self.records} records given {', '.join(FIELDS)}{specs}"


def migrate_store(store_dir: Path) -> Migrated:
    store = Store(store_dir)
    if not store.trials_path.is_file():
        return Migrated(store_dir, 0, 0)
    store.load()  # the store's own checks: a damaged line is one error, nothing written
    specs = _migrate_specs(store_dir / ARTEFACTS_NAME)
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
    return Migrated(store_dir, len(records), filled, specs)


def _migrate_specs(artefacts: Path) -> int:
    """Rewrite each run's spec.json of an older format as the current one (read as it ran)."""
    rewritten = 0
    for path in sorted(artefacts.glob(f"*/{folder.SPEC}")):
        text = path.read_text(encoding="utf-8")
        try:
            if json.loads(text).get("format", 1) >= FORMAT:
                continue
            spec = TrialSpec.from_json(text)
        except (ValueError, AttributeError, InvalidSpec) as exc:
            raise StoreError(f"{path}: not a readable spec: {exc}") from None
        write_atomic(path, (json.dumps(spec.to_json(), indent=2) + "\n").encode("utf-8"))  # as the runner writes it
        rewritten += 1
    return rewritten
