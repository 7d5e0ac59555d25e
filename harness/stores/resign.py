"""Recompute stored failure signatures with the current grouping (`python -m harness resign`).

A record keeps the signature it was given when it ran, with its `signature_version` (Sentry's
grouping versions): old and new keys of one bug do not match, so a store written before a
grouping change splits that bug in two. This command regroups a store's records of an older
version from the artefacts the trial left (ClusterFuzz re-groups old crashes the same way):
`output.txt` for crashes, aborts, out-of-memory and wrong results, `pyspy.json` for hangs. A
record whose artefacts are gone keeps its old signature and is counted. The store is rewritten
atomically (temp file + rename), so an interrupted run leaves it as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.stores.store import Store
from harness.trial import signature
from harness.trial.folder import OUTPUT, PYSPY
from harness.trial.hangs import read_pyspy_json
from harness.trial.outcome import Outcome, TrialResult


@dataclass(kw_only=True, slots=True)
class Resigned:
    store: Path
    records: int = 0
    older: int = 0
    """Records with a signature of an older version."""
    recomputed: int = 0
    changed: int = 0
    """Recomputed records whose key differs from the stored one."""
    missing: int = 0
    """Older records without the artefacts to recompute from (kept as they were)."""

    def line(self) -> str:
        return (
            f"{self.store}: {self.recomputed} of {self.older} older signatures recomputed to "
            f"v{signature.SIGNATURE_VERSION} ({self.changed} changed key), {self.missing} without "
            f"artefacts, {self.records} records"
        )


def recompute(record: TrialResult, store: Store) -> signature.Signature | None:
    """The record's signature under the current version, from its artefacts in `store`; None if
    they are gone."""
    art = store.artefacts_of(record)
    if art is None:
        return None
    if record.outcome is Outcome.HANG:
        dump = art / PYSPY
        return signature.hang_signature(read_pyspy_json(dump)) if dump.is_file() else None
    out = art / OUTPUT
    if not out.is_file():
        return None
    text = out.read_text(encoding="utf-8", errors="replace")
    if record.outcome is Outcome.WRONG_RESULT:
        return signature.wrong_result_signature(text, rc=record.rc)
    return signature.crash_signature(text, rc=record.rc)


def resign_store(store_dir: Path) -> Resigned:
    store = Store(store_dir)
    records = store.load()
    done = Resigned(store=store_dir, records=len(records))
    for r in records:
        if r.signature is None or (r.signature_version or 0) >= signature.SIGNATURE_VERSION:
            continue
        done.older += 1
        sig = recompute(r, store)
        if sig is None:
            done.missing += 1
            continue
        done.recomputed += 1
        done.changed += sig.key != r.signature
        r.signature, r.signature_summary, r.signature_version = sig.key, sig.summary, sig.version
        r.exc_type = sig.exc_type or r.exc_type
    if done.recomputed:
        store.rewrite(records)
    return done
