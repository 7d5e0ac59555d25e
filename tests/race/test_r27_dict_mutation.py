"""Race regression suite: r27_dict_mutation.

A compile fails with `OrderedDict mutated during iteration` while another thread mutates the
dict argument (pytorch#196208).

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r27"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r27_still_reproduces_under_switch(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)


@pytest.mark.timeout(racecheck.fix_timeout_s(RACE))
@pytest.mark.parametrize("chunk", racecheck.fix_chunks(RACE), ids=racecheck.chunk_id)
def test_race_r27_global_lock_holds_under_switch(chunk, tmp_path):
    racecheck.check_fix_holds(RACE, tmp_path, chunk)
