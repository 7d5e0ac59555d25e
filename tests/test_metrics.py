"""Steady-state throughput: the second half of the steps, so compile time does not count."""

import io

import torch

from dflash.metrics import Metrics


def _metrics() -> Metrics:
    return Metrics(stage_threads={"drafter": 1}, log_interval_s=1e9, total_steps=8, out=io.StringIO())


def _step(m: Metrics, step: int, tokens: int) -> None:
    m.record_step(step=step, loss=1.0, tokens=tokens, correct=torch.zeros(2), counts=torch.ones(2))


def test_steady_rate_ignores_a_slow_first_half(monkeypatch):
    clock = iter([0.0, 100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0, 107.0])
    monkeypatch.setattr("dflash.metrics.time.monotonic", lambda: next(clock))
    m = _metrics()
    m.start()  # t = 0
    for step in range(1, 9):  # step 1 lands at t = 100 (the compile), then one per second
        _step(m, step, 50)
    # marks[3] = (103, 200), marks[7] = (107, 400): 200 tokens in 4 s
    assert m.steady_tokens_per_s() == 50.0
    assert m.steady_window() == (103.0, 107.0)  # what bench's steady GPU busy fraction spans


def test_steady_rate_needs_four_steps():
    m = _metrics()
    m.start()
    for step in range(1, 4):
        _step(m, step, 10)
    assert m.steady_tokens_per_s() is None and m.steady_window() is None
    assert m.snapshot()["tokens_per_s_steady"] is None
