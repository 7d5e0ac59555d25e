"""The catalogue's CPU numbers are the store's: no count in tests/race/catalogue.py (and so in
repro/README.md, which quotes them) is typed in by hand. Cheap: reads the JSONL store only."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.store import Store
from tests.race.catalogue import CPU, CPU_TORCH, GPU, ON_TORCH

pytestmark = pytest.mark.race
STORE = Path(__file__).resolve().parents[2] / "results" / "catalogue-cpu"


def counts(records, cell: str) -> tuple[int, int]:
    runs = [r for r in records if r.cell == cell and r.outcome.counts_as_trial]
    return sum(r.outcome.is_failure for r in runs), len(runs)


@pytest.fixture(scope="module")
def records():
    return Store(STORE).load()


@pytest.mark.parametrize("race_id", sorted(CPU))
def test_race_catalogue_counts_are_the_stores(race_id, records):
    race = CPU[race_id]
    assert counts(records, f"{race.id}:raw@{race.plan}") == race.recorded
    assert counts(records, f"{race.id}:raw@-") == race.recorded_plain
    if race.fix is not None:
        assert counts(records, f"{race.id}:{race.fix}@{race.plan}") == race.fix_recorded
    torches = {r.torch_version for r in records if r.cell.startswith(f"{race.id}:")}
    assert torches == {CPU_TORCH}


STORED = [(key, ON_TORCH[key]) for key in sorted(ON_TORCH)] + [
    ((race.id, ".".join(race.torch.split(".")[:2])), race)
    for race in GPU.values() if race.source.startswith("results/")]


@pytest.mark.parametrize("key, race", STORED, ids=[f"{k[0]}-{k[1]}" for k, _ in STORED])
def test_rows_recorded_through_the_runner_on_another_torch_are_their_stores(key, race):
    store = Path(__file__).resolve().parents[2] / race.source.split()[0]
    records = Store(store.parent).load()
    plan = race.plan or "-"
    assert counts(records, f"{race.id}:raw@{plan}") == race.recorded
    assert counts(records, f"{race.id}:{race.fix}@{plan}") == race.fix_recorded
    torches = {r.torch_version.split("+")[0] for r in records if r.cell.startswith(f"{race.id}:")}
    assert torches == {race.torch.split("+")[0]} and race.torch.startswith(key[1] + ".")


@pytest.mark.parametrize("version, recorded_on", [("2.11.0+cu130", "2.11.0+cu130"), ("2.11.1", "2.11.0+cu130"),
                                                  ("2.13.0+cpu", CPU_TORCH), ("2.14.0", CPU_TORCH)])
def test_the_installed_torch_picks_its_own_record(monkeypatch, version, recorded_on):
    from tests.race import catalogue, racecheck

    monkeypatch.setattr(racecheck, "torch_version", lambda: version)
    assert catalogue.installed(CPU["r22"]).torch == recorded_on
    assert catalogue.installed(CPU["r06"]) is CPU["r06"]
