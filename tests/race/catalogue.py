"""The race suite's rows, read from the catalogue (harness/diagnosis/races.toml `[[repro]]`): what each
repro's regression checks expect, and where it was measured.

CPU rows: every count comes from the harness runner's store results/catalogue-cpu/trials.jsonl
(matrix spec harness/campaign/specs/catalogue-cpu.json, `python -m harness matrix --file
harness/campaign/specs/catalogue-cpu.json`), torch 2.13.0+cpu, Python 3.11.7, the shared 2-core CPU machine,
2026-11-29; `test_catalogue_store.py` checks that the numbers here are the store's. `recorded` is
the cell `<id>:raw@<plan>`, `recorded_plain` the cell `<id>:raw@-`, `fix_recorded` the cell
`<id>:<fix>@<plan>`.

GPU rows: every count comes from the harness runner's store results/gpu-repros/trials.jsonl
(`python -m harness matrix --preset gpu-repros --trials 10`), one H200, torch 2.11.0+cu130,
2026-11-30..12-01, cells `<id>:raw@-` and `<id>:<fix>@-` (the suite runs them without a plan),
checked by `test_catalogue_store.py` as the CPU rows are; only r10's fix (a script argument, not a
registry fix) keeps its direct script runs' count (results/h200-2026-11-29/run07, run12).
`recorded` counts the failures of the race's own family, which the store test checks too, so that
the reproduction check's trial count is computed from the rate of that family.

`fix_trials` is what the suite runs per fix on every `pytest -k race`: 29 (a 10% failure rate is
caught with 95% probability) for the two fixes cpu-quick also checks (r06 nested-fx-fallback, r16
global-lock); 10 for r07, r14, r15, r18, r27, r28 and 2 for the deterministic triggers (r11, r13, r17), to
keep CI within its budget -- those checks print their weaker bound. `RACE_FIX_TRIALS=29` runs every
fix check with 29 trials.

`windows` are the exposure windows of the row's races (harness.faults.exposure, `exposure` in the
catalogue); `fix_window`/`fix_exposed` state what the fix does to them, which the fix check's gate
holds it to (tests/race/racecheck.py `check_exposure`).
"""

from __future__ import annotations

import dataclasses

from harness.diagnosis.catalogue import Catalogue, RecordSource, Repro, load, major_minor
from tests.race.racecheck import REPRO_MAX_TRIALS, Race

CPU_TORCH = "2.13.0+cpu"
GPU_TORCH = "2.11.0+cu130"
CPU_STORE = "results/catalogue-cpu/trials.jsonl"
GPU_STORE = "results/gpu-repros/trials.jsonl"


_AS_RECORDED = (
    "id",
    "script",
    "device",
    "family",
    "plan",
    "recorded",
    "recorded_plain",
    "torch",
    "expect",
    "fix",
    "args",
    "fix_args",
    "fix_recorded",
    "fix_trials",
    "native",
    "fix_window",
    "fix_exposed",
)
"""The Race fields that are the catalogue row's own, as it records them."""


def _race(row: Repro, catalogue: Catalogue) -> Race:
    plan = row.plan or "-"
    cells = [f"{row.id}:raw@{plan}"] + ([f"{row.id}:{row.fix}@{plan}"] if row.fix else [])
    source = f"{row.store}/trials.jsonl cells {', '.join(cells)}"
    if row.fix_source:
        source += f"; fix: {row.fix_source}"
    return Race(
        **{name: getattr(row, name) for name in _AS_RECORDED},
        source=source,
        repro_cap=row.repro_cap or REPRO_MAX_TRIALS,
        windows=tuple(r.id for r in catalogue.races_of_repro(row.id) if r.exposure),
    )


_CATALOGUE = load()
_ROWS = _CATALOGUE.repros
_RECORDS = RecordSource()
"""Store records read once per process: every row's version lookup reads the same few stores."""
CPU: dict[str, Race] = {r.id: _race(r, _CATALOGUE) for r in _ROWS if r.device == "CPU" and r.on_torch is None}
GPU: dict[str, Race] = {r.id: _race(r, _CATALOGUE) for r in _ROWS if r.device == "GPU" and r.on_torch is None}
ON_TORCH: dict[tuple[str, str], Race] = {(r.id, r.on_torch): _race(r, _CATALOGUE) for r in _ROWS if r.on_torch}
"""Rows recorded on another torch than their table's, checked in its place where that torch
(major.minor) is installed: r22 measured on the H200's 2.11 through the harness runner, where the
stash loses a reference per thread exit and stash-incref gives it back. Elsewhere the 2.13 row
stands (a known negative there) and says when an upgrade brings the race back."""


UNRECORDED: dict[str, str] = {}
"""Rows checked on the installed torch against another torch's record: id -> the torch recorded
(tests/race/conftest.py lists them at the end of the run)."""


def measured_on(race: Race, major_minor: str) -> Race | None:
    """The row as the catalogue's version evidence measured it on `major_minor` (`[[race.versions]]`
    whose store holds this row's cells, e.g. results/versions-cpu-torch2.14.1), or None. A race at
    0/n there is checked as absent over as many trials as its record (a regression brings it back);
    otherwise the suite's reproduction check starts from that version's rate."""
    from tests.race.racecheck import matches_family

    fix_cell = f"{race.id}:{race.fix}@{race.plan or '-'}" if race.fix else None
    for candidate in _CATALOGUE.races_of_repro(race.id):
        for v in candidate.versions:
            if v.torch != major_minor or v.store is None:
                continue
            records = [r for r in _RECORDS(v.store) if r.replay_of is None and r.outcome.counts_as_trial]
            raw = [r for r in records if r.cell == race.cell]
            if not raw:
                continue
            fixed = [r for r in records if r.cell == fix_cell]
            k = sum(matches_family(race, r) for r in raw)
            torch = sorted({r.torch_version or "?" for r in raw})[-1]
            return dataclasses.replace(
                race,
                recorded=(k, len(raw)),
                recorded_plain=None,
                torch=torch,
                source=f"{v.store}/trials.jsonl cells {race.cell}" + (f", {fix_cell}" if fixed else ""),
                expect="reproduces" if k else "absent",
                repro_cap=len(raw) if not k else race.repro_cap,
                fix_recorded=(sum(r.outcome.is_failure for r in fixed), len(fixed)) if fixed else race.fix_recorded,
            )
    return None


def installed(race: Race, version: str | None = None) -> Race:
    """The row to check on the installed torch (or `version`): its ON_TORCH record, else what the
    catalogue's version evidence measured on this major.minor, else `race` itself (noted in
    UNRECORDED when `race` was recorded on another torch)."""
    from tests.race.racecheck import torch_version

    here = major_minor(version or torch_version())
    if (race.id, here) in ON_TORCH:
        return ON_TORCH[(race.id, here)]
    if major_minor(race.torch) == here:
        return race
    measured = measured_on(race, here)
    if measured is not None:
        return measured
    if version is None:
        UNRECORDED[race.id] = race.torch
    return race
