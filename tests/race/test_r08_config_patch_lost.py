"""Race regression suite: r08_config_patch_lost.

Interleaved config patches lose dynamic=False (F4); a known negative on torch 2.13.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r08"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r08_still_absent_under_switch(tmp_path):
    racecheck.check_absent(RACE, tmp_path)
