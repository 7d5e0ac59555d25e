"""Generated user programs, ground truth by construction: `harness stress` reads shapes nobody
described.

The writer and the expected verdicts are checked in-process (fast); the fixed sample
(tests/shapes/sample.py: a seeded draw, known-wrong and uncertain combinations left out) is then
stressed program by program, two or three runs each, and its verdict compared with what the
parts say. A program is compared only where each stress run's own truth confirms its fault fired
(`none`: that nothing did); a run the fault spared skips that program, never fails it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.shapes import truth
from tests.shapes.expected import expected
from tests.shapes.sample import GPU_SIZE, KNOWN_WRONG, UNCERTAIN, ci_sample, gpu_sample, matches
from tests.shapes.shape import GPU_FAULTS, PARTS, Shape, parse, valid_shapes
from tests.shapes.strategies import gpu_shapes, shapes, shrink
from tests.shapes.verdicts import Found, differences, judge
from tests.shapes.writer import program

SAMPLE = ci_sample()
GPU_SAMPLE = gpu_sample()


@settings(derandomize=True, max_examples=60, deadline=None)
@given(shapes())
def test_every_valid_shape_writes_a_program_that_parses(shape):
    tree = ast.parse(program(shape))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


@settings(derandomize=True, max_examples=30, deadline=None)
@given(gpu_shapes())
def test_every_gpu_shape_writes_a_program_that_parses_and_names_its_race(shape):
    assert any(isinstance(n, ast.FunctionDef) and n.name == "work" for n in ast.parse(program(shape)).body)
    want = expected(shape)
    assert want.races is None or want.races <= {"F1", "capture"}


@settings(derandomize=True, max_examples=200, deadline=None)
@given(shapes())
def test_the_expected_verdict_follows_from_the_parts(shape):
    want = expected(shape)
    assert (want.failing is False) == (not want.outcomes)
    assert not want.races or want.failing
    if shape.fault == "none" and shape.ending != "non-daemon-wait":
        assert not want.failing
    if shape.report == "swallowed" and shape.ending in ("exit-0", "os-exit") and shape.fault in ("F2", "R4"):
        assert not want.failing, "swallowed hides the exception and nothing else shows it"
    if want.deterministic:
        assert shape.fault == "deterministic" and not want.races


def test_invalid_combinations_are_said_and_refused():
    assert Shape("thread", "future-logged").why_invalid()
    assert Shape("executor-map", "own-excepthook").why_invalid()
    with pytest.raises(ValueError, match="future-logged"):
        parse("thread.future-logged.F2.exit-0")
    with pytest.raises(ValueError, match="start"):
        Shape("fork")
    assert len(valid_shapes()) == 1020


def test_the_shrink_moves_toward_the_simplest_values():
    wrong = Shape("daemon", "retry", "R4", "os-exit")
    # Wrong wherever R4 meets a report that hides no line: the shrink keeps those two parts.
    smallest = shrink(wrong, lambda s: s.fault == "R4" and s.report != "default-hook", budget=50)
    assert smallest == Shape("thread", "logging", "R4", "exit-0")


def test_truth_reads_a_crash_as_a_process_that_never_ended(tmp_path):
    lines = [{"event": "start", "pid": 1}, {"event": "start", "pid": 2}, {"event": "end", "pid": 1}]
    (tmp_path / "1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert truth.runs(tmp_path, "R5") == [truth.FIRED]
    assert truth.runs(tmp_path, "F2") == [truth.OTHER]


def test_a_verdict_differs_where_a_field_does():
    want = expected(Shape("thread", "default-hook", "F2"))
    found = Found(2, 2, frozenset({"F2"}), False, frozenset({"crash"}), ("fired", "fired"), "x")
    assert differences(want, found) == []
    missed = Found(2, 0, frozenset(), False, frozenset(), ("fired", "fired"), "x")
    assert differences(want, missed)[0].startswith("failing: expected every run")


def test_the_sample_covers_every_part_and_leaves_out_the_known_wrong():
    assert len(SAMPLE) >= 30 and len(set(SAMPLE)) == len(SAMPLE)
    assert not [s for s in SAMPLE if matches(s, KNOWN_WRONG) or matches(s, UNCERTAIN)]
    for part in ("start", "report", "ending"):
        assert {getattr(s, part) for s in SAMPLE} == set(PARTS[part]), part
    assert {s.fault for s in SAMPLE} == set(PARTS["fault"]) - {"R5"}


def test_the_gpu_sample_holds_each_cuda_fault_and_no_cpu_one():
    assert len(GPU_SAMPLE) == GPU_SIZE and len(set(GPU_SAMPLE)) == GPU_SIZE
    assert sorted({s.fault for s in GPU_SAMPLE}) == sorted(GPU_FAULTS)
    assert all(s.gpu for s in GPU_SAMPLE) and not any(s.gpu for s in SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SAMPLE, ids=[s.name for s in SAMPLE])
def test_stress_reads_the_generated_program(shape, tmp_path: Path):
    _judge_and_compare(shape, tmp_path)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", GPU_SAMPLE, ids=[s.name for s in GPU_SAMPLE])
def test_stress_reads_the_generated_gpu_program(shape, tmp_path: Path):
    _judge_and_compare(shape, tmp_path)


def _judge_and_compare(shape: Shape, tmp_path: Path) -> None:
    judged = judge(shape, tmp_path / "runs")
    if not judged.confirmed:
        pytest.skip(f"the fault did not fire in every run: {judged.found.classes}")
    assert not judged.diffs, f"{shape.name}: {judged.diffs} (expected {expected(shape)}; runs in {judged.found.folder})"
