"""The foreign corpus (tests/foreign/corpus.toml): programs written outside the harness, public bug
reports rewritten as programs among them. The table is whole, and the fast subset (one of each kind
of answer: a thread's exception at exit 0, two races in one run, a deadlock of the program's own
locks, a deterministic error, a clean program, a recompile limit at exit 0, a public report) gets
the expected answer from stress and diagnose. `python -m tools.corpus` runs them all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import corpus

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_holds_every_program_and_the_public_record():
    programs = corpus.load()
    listed = {p.path for p in programs}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "foreign").rglob("*.py")}
    assert on_disk <= listed, sorted(on_disk - listed)
    assert len(programs) >= 30
    public = [p for p in programs if not p.source.startswith("user shape")]
    assert len({p.source for p in public}) >= 15
    assert {p.expect for p in programs} >= {"OK", "CRASH", "ABORT", "HANG", "TIMEOUT", "DETERMINISTIC"}
    assert any(p.device == "cuda" for p in programs)


FAST = [p for p in corpus.load() if p.fast and p.device == "cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("program", FAST, ids=lambda p: p.name)
def test_a_fast_program_gets_its_expected_answer(program):
    found = corpus.run_one(program, python=sys.executable)
    assert found.ok, f"{found.verdict}; outcomes {found.outcomes}, races {found.found_races}"
