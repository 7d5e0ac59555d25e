"""Race regression suite: r24_compiled_graph_under_tracer.

A compiled (aot_eager) call fails with R4's NameError while another thread traces.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r24"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r24_still_reproduces_under_fx_widen(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)


@pytest.mark.timeout(racecheck.fix_timeout_s(RACE))
@pytest.mark.parametrize("chunk", racecheck.fix_chunks(RACE), ids=racecheck.chunk_id)
def test_race_r24_global_lock_holds_under_fx_widen(chunk, tmp_path):
    racecheck.check_fix_holds(RACE, tmp_path, chunk)
