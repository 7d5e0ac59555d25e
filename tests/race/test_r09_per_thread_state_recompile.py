"""Race regression suite: r09_per_thread_state_recompile.

A compiled function recompiles for a thread's different global state (F5).

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r09"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r09_still_reproduces_under_switch(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)
