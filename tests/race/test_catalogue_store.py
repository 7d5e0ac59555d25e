"""The catalogue's CPU numbers are the store's: no count in tests/race/catalogue.py (and so in
repro/README.md, which quotes them) is typed in by hand. Cheap: reads the JSONL store only."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from harness.stores.store import Store
from tests.race import racecheck
from tests.race.catalogue import CPU, CPU_TORCH, GPU, ON_TORCH

pytestmark = pytest.mark.race
ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "results" / "catalogue-cpu"
SPEC = json.loads((ROOT / "harness" / "campaign" / "specs" / "catalogue-cpu.json").read_text())


def counts(records, cell: str) -> tuple[int, int]:
    runs = [r for r in records if r.cell == cell and r.outcome.counts_as_trial]
    return sum(r.outcome.is_failure for r in runs), len(runs)


@functools.cache
def _load(store: Path) -> tuple:
    """A store's records, read once per module run (every row of a store reads the same file)."""
    return tuple(Store(store).load())


def _store_of(race) -> Path:
    """The store folder a row's `source` names (its first word is the store's trials.jsonl)."""
    return (ROOT / race.source.split()[0]).parent


@pytest.fixture(scope="module")
def records():
    return _load(STORE)


def family_counts(records, race, cell: str) -> tuple[int, int]:
    runs = [r for r in records if r.cell == cell and r.outcome.counts_as_trial]
    return sum(racecheck.matches_family(race, r) for r in runs), len(runs)


@pytest.mark.parametrize("race_id", sorted(CPU))
def test_race_catalogue_counts_are_the_stores(race_id, records):
    # Raw cells count the race's own family (r24's tracer thread also dies of F3 at times: another
    # race, not this row's); a fix's cell counts every failure, since a fix that fails otherwise
    # does not hold.
    race = CPU[race_id]
    assert family_counts(records, race, race.cell) == race.recorded
    assert family_counts(records, race, f"{race.id}:raw@-") == race.recorded_plain
    if race.fix is not None:
        # r26's row runs without a plan (its widening is a script argument): cell `r26:<fix>@-`.
        assert counts(records, f"{race.id}:{race.fix}@{race.plan or '-'}") == race.fix_recorded
    # The suite runs the row's script with the arguments the store's trials ran with.
    assert tuple(SPEC["workloads"][race.id]["argv"]) == (race.script, *race.args)
    torches = {r.torch_version for r in records if r.cell.startswith(f"{race.id}:")}
    assert torches == {CPU_TORCH}


STORED = [(key, ON_TORCH[key]) for key in sorted(ON_TORCH)] + [
    ((race.id, ".".join(race.torch.split(".")[:2])), race)
    for race in GPU.values()
    if race.source.startswith("results/")
]


@pytest.mark.parametrize("key, race", STORED, ids=[f"{k[0]}-{k[1]}" for k, _ in STORED])
def test_rows_recorded_through_the_runner_on_another_torch_are_their_stores(key, race):
    records = _load(_store_of(race))
    plan = race.plan or "-"
    assert counts(records, f"{race.id}:raw@{plan}") == race.recorded
    if race.fix is not None:
        assert counts(records, f"{race.id}:{race.fix}@{plan}") == race.fix_recorded
    torches = {r.torch_version.split("+")[0] for r in records if r.cell.startswith(f"{race.id}:")}
    assert torches == {race.torch.split("+")[0]}


def test_every_gpu_row_counts_from_the_runners_store():
    # r10's fix alone is a script argument with no runner cell (catalogue.py says so).
    assert {race.id for _, race in STORED if race.device == "GPU"} == set(GPU)


FAMILY_ROWS = [*((r, STORE) for r in CPU.values()), *((race, _store_of(race)) for _, race in STORED)]


@pytest.mark.parametrize("race, store", FAMILY_ROWS, ids=[f"{r.id}-{r.torch}" for r, _ in FAMILY_ROWS])
def test_recorded_failures_are_the_races_family(race, store):
    """Every failure a row counts has the row's signature family, as the reproduction check
    matches it: a family regex that no stored failure matches is a check that cannot pass (r04's
    message-text regex against its known-message signature, once)."""
    runs = [r for r in _load(store) if r.cell == race.cell and r.outcome.counts_as_trial]
    matching = [r for r in runs if racecheck.matches_family(race, r)]
    assert (len(matching), len(runs)) == race.recorded, (
        f"{race.id}: {len(matching)} of {race.recorded[0]} failures match /{race.family}/; the others: "
        f"{sorted({r.signature_summary for r in runs if r.outcome.is_failure and r not in matching})}"
    )


@pytest.mark.parametrize(
    "version, recorded_on, r06_on",
    [
        ("2.11.0+cu130", "2.11.0+cu130", "2.11.0"),
        ("2.11.1", "2.11.0+cu130", "2.11.0"),
        ("2.13.0+cpu", CPU_TORCH, CPU_TORCH),
        ("2.14.0", "2.14.1", "2.14.1"),
        ("2.16.0", CPU_TORCH, CPU_TORCH),
    ],
)
def test_the_installed_torch_picks_its_own_record(monkeypatch, version, recorded_on, r06_on):
    # 2.11: r22's ON_TORCH row, r06 from results/versions-cpu-torch2.11.0; 2.14: what
    # results/versions-cpu-torch2.14.1 measured; 2.16: no
    # record, so the 2.13 row stands (tests/race/conftest.py says so at the end of the run).
    from tests.race import catalogue, racecheck

    monkeypatch.setattr(racecheck, "torch_version", lambda: version)
    assert catalogue.installed(CPU["r22"]).torch == recorded_on
    assert catalogue.installed(CPU["r06"]).torch == r06_on
