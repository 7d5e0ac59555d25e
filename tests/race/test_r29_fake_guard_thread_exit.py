"""Race regression suite: r29_fake_guard_thread_exit.

On a CUDA build of torch 2.11 without a GPU, the first compiling thread's exit leaves the process's
CUDA device-guard registry pointing at that thread's freed thread_local: the next compile in any
thread segfaults. A CPU-only build (the suite's 2.13.0+cpu) has nothing to replace: checked absent
there; on a torch whose record shows it reproducing, checked for reproduction and for the fix.

Counts and thresholds: tests/race/catalogue.py (recorded in results/catalogue-cpu/ and the
versions-cpu stores); checks: tests/race/racecheck.py. Selected by `pytest -k race`."""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import CPU, installed

pytestmark = pytest.mark.race
RACE = installed(CPU["r29"])


@pytest.mark.timeout(racecheck.repro_timeout_s(RACE))
def test_race_r29_as_recorded_on_this_torch(tmp_path):
    racecheck.check_reproduces(RACE, tmp_path)
