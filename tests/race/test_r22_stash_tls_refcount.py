"""Race regression suite: r22_stash_tls_refcount.

A C-stashed object loses a reference when its thread exits (the suspected cause of the segfaults
under cstash-tls-init); a known negative on torch 2.13, whose binding takes its own reference.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU

pytestmark = pytest.mark.race
RACE = CPU["r22"]


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r22_still_absent_under_switch(tmp_path):
    racecheck.check_absent(RACE, tmp_path)
