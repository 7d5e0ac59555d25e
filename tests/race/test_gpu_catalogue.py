"""Race regression suite, GPU rows: r01-r05, r10, r12, r23 through the same harness runner.

Marked `cuda`: without a CUDA device tests/conftest.py skips them with the reason. On an H200:
`python -m pytest -k race -m cuda -n 4` (each test runs its trials one after another; a few
tests at once share the GPU, as the repros matrix's trials do).
The counts they start from are the harness runner's (results/gpu-repros, torch 2.11.0+cu130; r10's
fix alone is direct script runs): see tests/race/catalogue.py. On the H200 the 22 tests took 537 s
on 4 xdist workers (2026-12-01, results/h200-campaign/logs/run31-pytest-race-cuda.txt).
"""

from __future__ import annotations

import pytest

from tests.race import racecheck
from tests.race.catalogue import GPU

pytestmark = [pytest.mark.race, pytest.mark.cuda]
REPRODUCING = sorted(r.id for r in GPU.values() if r.expect == "reproduces")
ABSENT = sorted(r.id for r in GPU.values() if r.expect == "absent")
FIXED = sorted(r.id for r in GPU.values() if r.fix or r.fix_args)
TIMEOUT_S = 3 * 3600  # a GPU trial may take minutes (cold inductor compiles)


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("race_id", REPRODUCING)
def test_race_gpu_still_reproduces(race_id, tmp_path):
    racecheck.check_reproduces(GPU[race_id], tmp_path)


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("race_id", ABSENT)
def test_race_gpu_still_absent(race_id, tmp_path):
    racecheck.check_absent(GPU[race_id], tmp_path)


# One test item per chunk of a fix check's trials (as the CPU rows): 10 GPU trials one after another
# outlast a 500-s test phase; chunks let `-n 4` spread them.
FIX_ITEMS = [(race_id, chunk) for race_id in FIXED for chunk in racecheck.fix_chunks(GPU[race_id])]


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize(
    "race_id, chunk", FIX_ITEMS, ids=[f"{race_id}-{racecheck.chunk_id(chunk)}" for race_id, chunk in FIX_ITEMS]
)
def test_race_gpu_fix_holds(race_id, chunk, tmp_path):
    racecheck.check_fix_holds(GPU[race_id], tmp_path, chunk)
