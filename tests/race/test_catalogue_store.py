"""The catalogue's CPU numbers are the store's: no count in tests/race/catalogue.py (and so in
repro/README.md, which quotes them) is typed in by hand. Cheap: reads the JSONL store only."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.store import Store
from tests.race.catalogue import CPU, CPU_TORCH

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
