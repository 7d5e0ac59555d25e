"""What a diagnose TARGET names: a plain file, a store folder, a trial's artefacts folder, a
`harness stress -o` folder, or a stored trial id; each read into its failing runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness.diagnosis.failure import DiagnoseError, Failure
from harness.diagnosis.log_text import failures_in_text
from harness.diagnosis.trial_failures import failures_of, from_records, read_artefact
from harness.stores.discovery import TrialNotFound, find_trial, trial_stores_given
from harness.stores.retire import with_retired
from harness.stores.store import Store, StoreError
from harness.trial import hangs, signature
from harness.trial.folder import HANG_DUMP, PYSPY, RESULT, SPEC
from harness.trial.outcome import HARNESS_DEFECT, Outcome, TrialResult
from harness.trial.spec import CHILDREN_ENV, stored_fixes


def collect(targets: Sequence[str], *, stores: Sequence[Path] = (), torch: str | None = None) -> list[Failure]:
    """Failing runs named by the targets (see the module docstring)."""
    failures: list[Failure] = []
    for target in targets:
        path = Path(target)
        if path.is_file() and path.suffix != ".zip":
            failures += failures_in_text(
                path.read_text(encoding="utf-8", errors="replace"), source=str(path), torch=torch
            )
        elif path.is_dir() and (path / "trials.jsonl").is_file():
            failures += _from_store(path)
        elif path.is_dir() and (path / RESULT).is_file():
            failures += _from_folder(path)
        elif path.is_dir():
            runs = sorted((p for p in path.iterdir() if (p / RESULT).is_file()), key=_numeric)
            if not runs:
                raise DiagnoseError(f"{target}: no trial folders (result.json) and no trials.jsonl in it")
            for run in runs:
                failures += _from_folder(run)
        else:
            failures += _from_trial_id(target, stores)
    return failures


def _numeric(p: Path) -> tuple:
    return (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name)


def _from_folder(folder: Path) -> list[Failure]:
    try:
        record = TrialResult.from_json(json.loads((folder / RESULT).read_text()))
    except (ValueError, KeyError, TypeError) as e:
        raise DiagnoseError(f"{folder}/result.json: not a trial result: {e}") from None
    if record.outcome is Outcome.TIMEOUT:
        return [_timeout(record, folder)]
    if record.outcome is Outcome.HARNESS_ERROR and record.detail.startswith(HARNESS_DEFECT):
        return [_harness_defect(record, folder)]
    if not record.outcome.is_failure and record.outcome is not Outcome.OK:
        return []
    failures = failures_of(record, folder, every_thread=True)
    spec = folder / SPEC
    for failure in failures:
        failure.source = failure.run = str(folder)
    if spec.is_file():
        try:
            data = json.loads(spec.read_text())
            fixes = stored_fixes(data) or ()
            workload = data.get("workload") or {}
            command = tuple(workload.get("argv") or ()) if workload.get("kind") == "command" else ()
            options = _run_options(data)
        except (ValueError, AttributeError):
            fixes, command, options = (), (), ()
        for failure in failures:
            failure.fixes = fixes or failure.fixes
            failure.command = command
            failure.options = options
    return failures


def _run_options(spec: dict) -> tuple[str, ...]:
    """The stress options a run's spec shows it ran under that decide what fails: its plan."""
    plan = spec.get("plan")
    profile = plan.get("profile") if isinstance(plan, dict) else None
    children = (spec.get("env") or {}).get(CHILDREN_ENV) == "1"
    return (("--plan", str(profile)) if profile else ()) + (("--children",) if children else ())


def _harness_defect(record: TrialResult, folder: Path) -> Failure:
    """A run the harness's own code failed (a fix's wrapper raised): said so, never matched as a race."""
    return Failure(
        source=str(folder),
        outcome="HARNESS_ERROR",
        key=None,
        summary=record.detail,
        text="",
        torch=record.torch_version,
        run=str(folder),
        detail=record.detail,
    )


def _timeout(record: TrialResult, folder: Path) -> Failure:
    """A run past its deadline: slow, not hung; its dump says where it was busy."""
    dump = folder / PYSPY
    threads = hangs.read_pyspy_json(dump) if dump.is_file() else ()
    key = signature.hang_signature(threads).key if threads else None
    return Failure(
        source=str(folder),
        outcome="TIMEOUT",
        key=key,
        summary=f"slow: {record.detail}",
        text=read_artefact(folder, HANG_DUMP),
        torch=record.torch_version,
        run=str(folder),
        detail=record.detail,
    )


def _from_store(store_dir: Path) -> list[Failure]:
    try:
        records = Store(store_dir).load()
    except StoreError as e:
        raise DiagnoseError(str(e)) from None
    return from_records(records, store_dir)


def _from_trial_id(trial_id: str, stores: Sequence[Path]) -> list[Failure]:
    try:
        record, store_dir = find_trial(trial_id, with_retired(trial_stores_given(list(stores))))
    except TrialNotFound as e:
        raise DiagnoseError(f"{trial_id}: not a file, a folder or a stored trial ({e})") from None
    if not record.outcome.is_failure:
        raise DiagnoseError(f"{trial_id}: ended {record.outcome.name}, nothing to diagnose")
    return failures_of(record, Store(store_dir).artefacts_of(record), every_thread=True)
