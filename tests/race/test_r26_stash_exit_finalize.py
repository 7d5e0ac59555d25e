"""Race regression suite: r26_stash_exit_finalize.

A process dies at exit because a joined thread's C++ TLS stash is dropped during finalization
(widened: the stashed object's teardown keeps giving the GIL up for 0.2 s).

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/); checks:
tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r26"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r26_still_reproduces(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)


@pytest.mark.timeout(racecheck.fix_timeout_s(RACE))
@pytest.mark.parametrize("chunk", racecheck.fix_chunks(RACE), ids=racecheck.chunk_id)
def test_race_r26_await_thread_exit_holds(chunk, tmp_path):
    racecheck.check_fix_holds(RACE, tmp_path, chunk)
