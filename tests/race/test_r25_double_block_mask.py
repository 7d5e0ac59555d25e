"""Race regression suite: r25_double_block_mask.

Threads build two BlockMasks a step (full and sliding-window layers) beside one shared compiled
flex_attention; looked for (an output unequal to SDPA, an exception in a thread, a hang) and not
seen: a known negative, checked as absent.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r25"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r25_as_recorded_on_this_torch(tmp_path):
    # check_reproduces checks an `absent` row for absence; a torch whose record shows it
    # reproducing is checked for reproduction instead.
    racecheck.check_reproduces(RACE, tmp_path)
