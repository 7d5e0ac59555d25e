"""A stored run's failures: its record's, and each face its artefacts show (output, thread records)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

from harness.diagnosis.catalogue import load
from harness.diagnosis.failure import AFTER_FAILURE, Failure
from harness.runtime.fixes import FIXES
from harness.stores.store import Store
from harness.trial import signature, thread_records
from harness.trial.folder import CONFIG_SETS, NATIVE_STACK
from harness.trial.folder import text as folder_text
from harness.trial.outcome import TrialResult


def from_record(record: TrialResult, art=None) -> Failure:
    """A stored trial's first failure; its artefacts (a folder or a packed zip) add the output and
    native stack. `failures_of` gives every failure of the run."""
    return failures_of(record, art)[0]


def from_records(records: Iterable[TrialResult], store_dir: Path) -> list[Failure]:
    """The failing trials of a matrix run, with their artefacts."""
    store = Store(store_dir)
    return [
        f
        for r in records
        if r.replay_of is None and r.outcome.is_failure and r.outcome.counts_as_trial
        for f in failures_of(r, store.artefacts_of(r), every_thread=True)
    ]


def failures_of(record: TrialResult, art=None, *, every_thread: bool = False) -> list[Failure]:
    """Every distinct failure of a stored run (TrialResult.failures), each with the run's output;
    one for a run stored before failures were kept, or whose failure printed no traceback (a hang,
    a signal). `every_thread`: also each face the artefacts show that the record lacks (the thread
    hook's thread_errors.jsonl, every traceback of the whole output), so that every race of the run
    is named."""
    # The output less libraries' noise, plus the program's Futures' exceptions (recorded, not printed).
    text, own_blocks = thread_records.program_view(art) if art is not None else ("", [])
    base = Failure(
        source=record.trial_id,
        outcome=record.outcome.name,
        key=record.signature,
        summary=record.signature_summary,
        text=text,
        native=read_artefact(art, NATIVE_STACK),
        torch=record.torch_version,
        fixes=_fixes_of(record),
        run=record.trial_id,
        detail=record.detail,
        threads_started=getattr(record, "threads_started", None),
        exposures=record.exposures,
        config_threads=recorded_config_sets(art),
    )
    entries = [e for e in record.failures or () if isinstance(e, dict) and e.get("key")]
    if every_thread:
        entries = _every_face(entries, base.text, own_blocks, record)
    children = thread_records.child_threads(thread_records.read(art)) if art is not None else {}
    return [_in_process(f, children) for f in _split(base, entries, record)]


def _in_process(failure: Failure, children: dict[str, str]) -> Failure:
    """The failure marked with the child process it failed in, where only a child recorded its
    threads (`children`: thread_records.child_threads of the run)."""
    where = {children.get(t) for t in failure.threads}
    if failure.threads and len(where) == 1 and None not in where:
        failure.process = where.pop()
    return failure


def _split(base: Failure, entries: list[dict], record: TrialResult) -> list[Failure]:
    """The run's failures: one per distinct failure of a crash, the hang and what failed before it."""
    if record.outcome.name == "HANG" and entries:
        # A thread died before the rest hung (a producer whose consumer then waits forever): the
        # hang and each printed failure are findings of the run.
        base.detail = f"{AFTER_FAILURE}; {record.detail}"
        return [base] + [dataclasses.replace(_of_entry(base, e), outcome="CRASH", detail="") for e in entries]
    if record.outcome.name not in ("CRASH", "ABORT") or len(entries) < 2:
        return [dataclasses.replace(base, threads=_entry_threads(entries[0])) if entries else base]
    return [_of_entry(base, e) for e in entries]


def _of_entry(base: Failure, entry: dict) -> Failure:
    return dataclasses.replace(
        base,
        key=entry["key"],
        summary=entry.get("summary"),
        count=int(entry.get("count") or 1),
        threads=_entry_threads(entry),
    )


def _entry_threads(entry: dict) -> tuple[str, ...]:
    threads = entry.get("threads") or ()
    return tuple(str(t) for t in threads) if isinstance(threads, list) else ()


def _every_face(entries: list[dict], text: str, hooked: list[str], record: TrialResult) -> list[dict]:
    """The record's failures, then each failure the output and the thread hook's records show that
    none of them is (by key, summary or race): a record kept fewer (stored before they were all
    kept, or by an older signature version)."""
    if record.signature and not entries and record.outcome.name in ("CRASH", "ABORT"):
        entries = [{"key": record.signature, "summary": record.signature_summary, "count": 1}]
    seen = {e["key"] for e in entries} | {e.get("summary") for e in entries}
    races = {_race_of(e.get("summary")) for e in entries} - {None}
    for found in signature.run_failures(text, extra=hooked):
        entry = found.to_json()
        race = _race_of(entry["summary"])
        if entry["key"] in seen or entry["summary"] in seen or (race is not None and race in races):
            continue
        entries.append(entry)
        seen |= {entry["key"], entry["summary"]}
        races.add(race)
    return entries


def _race_of(summary: str | None) -> str | None:
    """The catalogued race a summary names by the families' rule; None for a generic or no race."""
    catalogue = load()
    family = catalogue.family(summary)
    return None if family in ("other", "?") or catalogue.race(family).kind == "generic" else family


def recorded_config_sets(art) -> str:
    """A trial folder's config sets (`config_sets`), "" where it has none."""
    return config_sets(read_artefact(art, CONFIG_SETS))


def config_sets(raw: str) -> str:
    """The bootstrap's record of the configs the program set (`config_sets.jsonl`) as one line,
    `THREAD: MODULE.NAME=VALUE; ...`, a reset call as `THREAD: torch._dynamo.reset() beside N
    threads`, a child process's with `(pid P)` after its thread ("" where it set none or the run
    predates the record)."""
    sets = []
    for line in raw.splitlines():
        try:
            r = json.loads(line)
            who = f"{r['thread']} (pid {r['pid']})" if "pid" in r else r["thread"]
            what = f"{r['call']} beside {r['beside']} threads" if "call" in r else f"{r['config']}={r['value']}"
            sets.append(f"{who}: {what}")
        except (ValueError, KeyError, TypeError):
            continue
    return "; ".join(sets)


def read_artefact(art, name: str) -> str:
    return (folder_text(art / name) if art is not None else None) or ""


def _fixes_of(record: TrialResult) -> tuple[str, ...]:
    """The registry fixes a stored trial ran (its record's field; `raw`, `eager` and
    `no-cudagraphs` are not fixes)."""
    return tuple(f for f in record.fixes or () if f in FIXES)
