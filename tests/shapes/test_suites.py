"""Generated test suites for `harness hunt` (tests/shapes/suites.py): every pattern in every place,
one hunt over the suite, each test's verdict as its parts say, and the same folder read by
`diagnose` gives the same verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shapes.suites import (
    CO_RACES,
    PATTERNS,
    PLACES,
    RACES,
    TestShape,
    all_shapes,
    expected,
    single,
    source,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_shape_writes_a_test_that_parses_under_its_id(tmp_path):
    folder = write_suite(all_shapes(), tmp_path / "suite")
    text = (folder / "hunt_generated.py").read_text()
    compile(text, "hunt_generated.py", "exec")
    for shape in all_shapes():
        assert shape.test_id.split("::")[0] in text, shape
    assert "monkeypatch" in source(TestShape("own-fixture", "helper"))
    with pytest.raises(ValueError, match="unknown"):
        TestShape("own-locale")
    assert {expected(s) for s in all_shapes()} == {"ok", "not a race", "race", "not thread-safe"}


@pytest.mark.slow
def test_hunt_reads_every_generated_test(tmp_path):
    shapes = all_shapes()
    suite = write_suite(shapes, tmp_path / "suite")
    out = tmp_path / "hunt"
    cmd = [sys.executable, "-m", "harness", "hunt", "--json", "-o", str(out), "--", str(suite)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    report = json.loads(proc.stdout)
    found = {t["id"].split("::", 1)[1]: t for t in report["tests"]}
    assert sorted(found) == sorted(s.test_id for s in shapes), proc.stderr[-2000:]
    wrong = {
        s.test_id: (expected(s), found[s.test_id]["verdict"], found[s.test_id]["why"])
        for s in shapes
        if found[s.test_id]["verdict"] != expected(s) or (found[s.test_id]["threads"] == 1) != single(s)
    }
    assert not wrong, wrong
    races = {s.test_id: set(found[s.test_id]["races"]) for s in shapes if s.pattern in RACES}
    named = [
        s.pattern in races[s.test_id] and races[s.test_id] <= {s.pattern, *CO_RACES}
        for s in shapes
        if s.pattern in RACES
    ]
    assert all(named), races
    assert len(PATTERNS) * len(PLACES) == len(shapes)
    # The same folder through diagnose: the same verdict for each test.
    again = subprocess.run(
        [sys.executable, "-m", "harness", "diagnose", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    read = {t["id"].split("::", 1)[1]: t["verdict"] for t in json.loads(again.stdout)["tests"]}
    assert read == {k: t["verdict"] for k, t in found.items()}
