"""The torch-versions table: a repro's cells by the torch each trial ran on, and what changed."""

from __future__ import annotations

from pathlib import Path

from harness.analysis import versions
from harness.trial.outcome import Outcome, TrialResult

OWN = {
    "r06": "fx-trace-of-dynamo-fn (RuntimeError in repro-caller at torch._dynamo.eval_frame:compile_wrapper)",
    "r07": "fx-current-patcher (torch._dynamo.exc.BackendCompilerFailed in repro-compiler)",
    "r13": "WRONG_RESULT: main set error_on_nested_fx_trace=False but 1/1 worker threads see True",
    "r25": "WRONG_RESULT: block-mask: 1/24 outputs unequal to SDPA",
}
"""A failure of each repro's own race, as its trials' signatures read."""


def _r(matrix: str, cell: str, i: int, failed: bool, torch: str, summary: str | None = None) -> TrialResult:
    summary = summary or OWN[cell.split(":")[0]]
    return TrialResult(
        trial_id=f"{matrix}/{cell}/{i}",
        cell=cell,
        trial_index=i,
        outcome=Outcome.CRASH if failed else Outcome.OK,
        torch_version=torch,
        signature=summary if failed else None,
        signature_summary=summary if failed else None,
    )


def test_a_race_that_stops_reproducing_and_a_fix_that_turns_harmful_are_said():
    old = [_r("catalogue-cpu", "r06:raw@fx-widen", i, True, "2.13.0+cpu") for i in range(3)]
    old += [_r("catalogue-cpu", "r06:nested-fx-fallback@fx-widen", i, False, "2.13.0+cpu") for i in range(3)]
    old += [_r("catalogue-cpu", "r06:raw@-", i, True, "2.13.0+cpu") for i in range(2)]  # not in the later runs
    new = [_r("versions-cpu", "r06:raw@fx-widen", i, False, "2.14.1") for i in range(2)]
    new += [_r("versions-cpu", "r06:nested-fx-fallback@fx-widen", i, i == 0, "2.14.1") for i in range(2)]
    new += [
        _r("versions-cpu", "r07:raw@fx-widen", 0, True, "2.14.1"),
        _r("other", "r07:raw@fx-widen", 1, True, "2.14.1"),
    ]
    text = versions.body([(Path("a"), old), (Path("b"), new)])
    assert "| torch 2.13.0 | torch 2.14.1 |" in text
    assert (
        "| r06 | `r06:raw@fx-widen` | `nested-fx-fallback` | 3/3, fix 0/3: reproduces, fix holds | "
        "0/2, fix 1/2: no longer reproduces, fix now harmful |"
    ) in text
    assert "| r07 | `r07:raw@fx-widen` | `-` | not run | 1/1: reproduces |" in text  # other matrices left out
    assert "r06:raw@-" not in text


def test_an_older_torch_that_never_had_the_race_is_not_said_to_have_lost_it():
    # 2.11's CPU cells of a race that 2.13 brought (F14's per-thread config): "not reproduced", not
    # "no longer"; the version that drops it again after reproducing is the one that changed.
    rs = [
        _r("versions-cpu", "r13:raw@switch", 0, False, "2.11.0"),
        _r("versions-cpu", "r13:nested-fx-fallback@switch", 0, False, "2.11.0"),
        _r("catalogue-cpu", "r13:raw@switch", 0, True, "2.13.0+cpu"),
        _r("versions-cpu", "r13:raw@switch", 1, False, "2.14.1"),
    ]
    text = versions.body([(Path("a"), rs)])
    assert (
        "| r13 | `r13:raw@switch` | `nested-fx-fallback` | 0/1, fix 0/1: not reproduced, fix not needed | "
        "1/1: reproduces | 0/1: no longer reproduces |"
    ) in text


def test_a_failure_by_another_race_is_shown_and_decides_nothing():
    # Torch 2.11's CUDA build on a machine without a GPU: r25's trials segfault by fake-guard-exit
    # (r29) before its own race could show; the row says so instead of "reproduces".
    segv = "Segmentation fault at torch._subclasses.fake_tensor:__enter__"
    rs = [_r("versions-cpu", "r25:raw@switch", i, True, "2.11.0", segv) for i in range(3)]
    rs += [_r("versions-cpu", "r25:raw@switch", 3, True, "2.11.0")]
    rs += [_r("catalogue-cpu", "r25:raw@switch", 0, False, "2.13.0+cpu")]
    text = versions.body([(Path("a"), rs)])
    assert "| r25 | `r25:raw@switch` | `-` | 1/4 (+3 fake-guard-exit): reproduces | 0/1: no longer reproduces |" in text
    assert versions.counts([(Path("a"), rs)])[("r25:raw@switch", "2.11.0")] == (1, 4)
