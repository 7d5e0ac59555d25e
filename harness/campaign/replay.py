"""`python -m harness replay TRIAL_ID [-n N]`: rerun a stored trial N times and count how many
reproduced its signature.

The spec comes from the trial's own `spec.json` (written by the runner next to its output), so
the replay has the same workload, fixes, plan and plan seed. Whether a failure replays is
measured, never assumed: the answer is k/N with a Wilson interval. Replays are stored, with
`replay_of` set, in `<store>/replays` (a separate store, so matrix tables are not mixed with
them) under ids `<trial id>~replay<j>`, j counting on from earlier replays.

A PCT plan's change points fall on steps of the process's hit count, which the interleaving moves;
the replay pins them to the thread, point and hit the original's plan log names
(harness.faults.pct.pinned_from_log), so the same thread is demoted at the same hit.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from pathlib import Path

from harness import stats
from harness.campaign.local import with_run_dir
from harness.campaign.matrix import presets as matrix_presets
from harness.campaign.matrix import specfile
from harness.campaign.matrix.expand import expand
from harness.campaign.matrix.spec import MatrixError
from harness.faults.pct import pinned_from_log
from harness.runtime.errors import UserInputError
from harness.stores.store import ARTEFACTS_NAME, ArtefactPath, Store, StoreError, safe_name
from harness.trial.folder import PLAN_LOG, SPEC
from harness.trial.outcome import TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import InvalidSpec, TrialSpec

REPLAYS_NAME = "replays"


class ReplayError(UserInputError):
    """Unknown trial id, or a stored trial that cannot be replayed."""


def load_trial_spec(record: TrialResult, store_dir: Path) -> TrialSpec:
    # The store's own layout first (the folder or its zip, harness.stores.zips): the recorded path may
    # be relative to another working folder.
    try:
        art = Store(store_dir).artefacts_of(record)
    except StoreError as e:
        raise ReplayError(str(e)) from None
    candidates: list[ArtefactPath] = [art / SPEC] if art is not None else []
    candidates.append(store_dir / ARTEFACTS_NAME / safe_name(record.trial_id) / SPEC)
    if record.artefacts:
        candidates.append(Path(record.artefacts) / SPEC)
    path = next((c for c in candidates if c.exists()), candidates[-1])
    if not path.exists():
        rebuilt = spec_from_matrix(record, store_dir)
        if rebuilt is not None:
            return rebuilt
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ReplayError(f"cannot read the spec of {record.trial_id}: {path}: {e.strerror or e}") from None
    try:
        return TrialSpec.from_json(text)
    except InvalidSpec as e:
        raise ReplayError(f"{path}: {e}") from None


def pin_pct_changes(spec: TrialSpec, record: TrialResult, store_dir: Path) -> TrialSpec:
    """`spec` with its PCT change points pinned to those the original's plan log recorded;
    unchanged without a PCT plan or without the log (a lean store)."""
    if not spec.plan or not spec.plan.get("pct"):
        return spec
    try:
        art = Store(store_dir).artefacts_of(record)
    except StoreError as e:
        raise ReplayError(str(e)) from None
    log = art / PLAN_LOG if art is not None else None
    if log is None or not log.is_file():
        return spec
    plan = {**spec.plan, "pct": {**spec.plan["pct"], "pinned": pinned_from_log(log.read_text(encoding="ascii"))}}
    return dataclasses.replace(spec, plan=plan)


def spec_from_matrix(record: TrialResult, store_dir: Path) -> TrialSpec | None:
    """A stored trial whose artefacts were not kept (a lean committed store, e.g.
    results/catalogue-cpu), rebuilt from the matrix that ran it: a `spec.json` in the store (a
    JSON matrix spec) or the preset of the trial's matrix name (spec files included). Ids and plan seeds are
    deterministic (harness.campaign.expand.expand), so the same id gives the same workload, fixes and plan
    as long as that spec has not changed since. None when neither knows the trial."""
    name = record.matrix
    candidates = []
    if (store_dir / SPEC).is_file():
        candidates.append(lambda: specfile.load_spec(store_dir / SPEC))
    if name in matrix_presets.names():
        candidates.append(lambda: matrix_presets.get(name))
    for make in candidates:
        try:
            spec = make()
        except MatrixError:
            continue
        if spec.name != name:
            continue
        for trial in expand(spec):
            if trial.trial_id == record.trial_id:
                return trial
    return None


def same_failure(original: TrialResult, replay: TrialResult) -> bool:
    """Same outcome and same signature (for OK originals: OK again)."""
    return replay.outcome is original.outcome and replay.signature == original.signature


def replay(record: TrialResult, store_dir: Path, times: int, *, stream=None) -> list[TrialResult]:
    stream = stream or sys.stderr

    spec = pin_pct_changes(load_trial_spec(record, store_dir), record, store_dir)
    store = Store(store_dir / REPLAYS_NAME)
    first = sum(1 for r in store.load() if r.replay_of == record.trial_id)
    results = []
    for j in range(first, first + times):
        rid = f"{record.trial_id}~replay{j}"
        artefacts = store.artefacts_dir(rid)
        again = with_run_dir(dataclasses.replace(spec, trial_id=rid), artefacts)
        result = run_trial(again, artefacts, replay_of=record.trial_id)
        store.append(result)
        results.append(result)
        mark = "same" if same_failure(record, result) else "different"
        print(
            f"replay {j - first + 1}/{times}: {result.outcome.name} ({mark}) {result.detail}", file=stream, flush=True
        )
    return results


def summary(record: TrialResult, results: list[TrialResult]) -> dict:
    k = sum(same_failure(record, r) for r in results)
    n = len(results)
    ci = stats.wilson(k, n)
    others = collections.Counter(
        f"{r.outcome.name} {r.signature_summary or ''}".strip() for r in results if not same_failure(record, r)
    )
    return {
        "trial_id": record.trial_id,
        "outcome": record.outcome.name,
        "signature": record.signature,
        "signature_summary": record.signature_summary,
        "plan_seed": record.plan_seed,
        "replays": n,
        "reproduced": k,
        "wilson_low": ci.low,
        "wilson_high": ci.high,
        "outcomes": dict(sorted(collections.Counter(r.outcome.name for r in results).items())),
        "others": dict(sorted(others.items())),
    }
