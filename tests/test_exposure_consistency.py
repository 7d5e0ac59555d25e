"""Probes agree with failures: in every committed store, a trial that failed as a race with an
exposure probe, and measured that race's window, saw the window open. A trial that did not is a
probe defect (the probe misses a way the race happens) and is listed here, which the test holds
empty."""

from __future__ import annotations

from harness.diagnosis.catalogue import load
from harness.stores.store import Store
from tests.test_diagnose import committed_stores

PROBE_DEFECTS: tuple[str, ...] = ()
"""trial ids of failures of race X whose X window was measured and never opened."""


def test_every_failure_of_a_probed_race_opened_its_window():
    catalogue = load()
    probed = {r.id for r in catalogue.races if r.exposure}
    checked, defects = 0, []
    for store in committed_stores():
        for r in Store(store).load():
            if not r.outcome.is_failure or r.exposures is None:
                continue
            race = catalogue.family(r.signature_summary)
            if race not in probed or race not in r.exposures:
                continue
            checked += 1
            if r.exposures[race] == 0 and r.trial_id not in PROBE_DEFECTS:
                defects.append(f"{store}: {r.trial_id} failed as {race}, its window never opened")
    assert checked >= 100, checked
    assert not defects, "\n".join(defects)
