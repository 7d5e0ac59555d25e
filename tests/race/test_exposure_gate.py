"""The fix check's exposure gate on real trials: r06's fix check passes where its window is counted
and fails, with the same trial, when the probes are turned off (HARNESS_EXPOSURE=0, the switch
the runner honours for every trial)."""

from __future__ import annotations

import pytest

from harness.faults.exposure import ENV_EXPOSURE
from tests.race import racecheck
from tests.race.catalogue import CPU

pytestmark = pytest.mark.race
RACE = CPU["r06"]


@pytest.mark.timeout(600)
def test_race_fix_check_gate_passes_with_the_probes_and_fails_without(monkeypatch, tmp_path):
    monkeypatch.setenv(racecheck.FIX_TRIALS_ENV, "1")
    with pytest.warns(racecheck.RaceBound, match=r"window F2 opened in 1 of 1 trial.*run eagerly"):
        racecheck.check_fix_holds(RACE, tmp_path / "on")
    monkeypatch.setenv(ENV_EXPOSURE, "0")
    with pytest.raises(pytest.fail.Exception, match=r"exposure not measured in fix trials \[0\].*not shown to hold"):
        racecheck.check_fix_holds(RACE, tmp_path / "off")
