"""Race regression suite: r22_stash_tls_refcount.

A C-stashed object loses a reference when its thread exits (the cause of the segfaults under
cstash-tls-init on torch 2.11). On 2.13, whose binding takes its own reference, a known negative;
on 2.11 (ON_TORCH) it reproduces every time and stash-incref must hold.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/ and, for 2.11,
results/gpu-repros/); checks: tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r22"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r22_as_recorded_on_this_torch(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)  # an `absent` row (2.13's) is checked for absence


if RACE.fix is not None:  # the 2.11 record; 2.13's row is a known negative with no fix to check

    @pytest.mark.timeout(racecheck.fix_timeout_s(RACE))
    @pytest.mark.parametrize("chunk", racecheck.fix_chunks(RACE), ids=racecheck.chunk_id)
    def test_race_r22_stash_incref_holds(chunk, tmp_path):
        racecheck.check_fix_holds(RACE, tmp_path, chunk)
