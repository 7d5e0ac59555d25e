"""The run's timeline: phases in order, per-thread warm-ups, marks, and a line while a phase runs long."""

from __future__ import annotations

import io
import time

from dflash.timeline import Timeline, process_age_s


def test_the_process_age_counts_the_imports_before_the_timeline():
    age = process_age_s()
    assert 0 < age < 3600  # this test process, started minutes ago at most
    tl = Timeline(io.StringIO(), tick_s=0)
    assert tl.phases["imports"] >= age - 0.01


def test_phases_add_up_in_order_and_a_phase_that_comes_back_adds_to_its_time():
    tl = Timeline(io.StringIO(), tick_s=0)
    with tl.phase("corpus"):
        time.sleep(0.05)
    t0 = time.monotonic()
    time.sleep(0.05)
    tl.span("training", t0, time.monotonic())
    tl.mark("first_step_at", t0)
    with tl.phase("corpus"):
        time.sleep(0.05)
    tl.thread("dflash-train-0 warmup", 1.5)
    tl.thread("dflash-train-0 warmup", 0.5)
    rec = tl.record()
    assert list(rec)[:3] == ["imports", "corpus", "training"]
    assert rec["corpus"] >= 0.1 and rec["training"] >= 0.05
    assert rec["warmup_by_thread"] == {"dflash-train-0 warmup": 2.0}
    assert rec["first_step_at"] <= rec["total"]
    assert rec["outside_training_frac"] == round(1 - rec["training"] / rec["total"], 3)
    line = tl.line(rec)
    assert line.startswith("timeline: imports ") and "corpus 0.1s" in line
    assert "first step at" in line and "outside training" in line


def test_a_span_with_its_ends_reversed_is_not_recorded():
    tl = Timeline(io.StringIO(), tick_s=0)
    tl.span("training", 2.0, 1.0)
    assert "training" not in tl.record()


def test_a_long_phase_says_what_it_is_doing_while_it_runs_and_a_short_one_says_nothing():
    err = io.StringIO()
    tl = Timeline(err, tick_s=0.1)
    tl.start_ticker()
    try:
        with tl.phase("quick"):
            pass
        with tl.phase("corpus"):
            tl.note("regenerating the synthetic corpus with the target: 32 of 512 samples")
            time.sleep(0.45)
    finally:
        tl.close()
    lines = err.getvalue().splitlines()
    assert lines and all(ln.startswith("phase corpus: ") for ln in lines), lines
    assert "32 of 512 samples" in lines[-1]
    assert tl._ticker is not None and not tl._ticker.is_alive()
