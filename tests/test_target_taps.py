"""target-hook-taps: per-thread layer hooks give the same context as output_hidden_states, and stay
right when transformers' output capture does not (two eager forwards while "compiling").

torch.compiler.is_compiling() is process-wide while any thread traces (R8), and transformers'
collector is then a process global (transformers#44614, r19): patching is_compiling to True is
what a drafter thread's compile does to the target threads, without the compile's timing.
"""

from __future__ import annotations

import threading

import pytest
import torch

from dflash.config import TargetConfig
from dflash.target import build_target

LAYERS = (0, 2, 3)  # 3 is the last layer: HF returns it final-normed
CALLS = 200


@pytest.fixture(scope="module")
def target():
    return build_target(TargetConfig(), "cpu")


def _inputs():
    return [torch.randint(1, 200, (2, 16), generator=torch.Generator().manual_seed(s)) for s in range(2)]


def test_hooked_taps_equal_output_hidden_states(target):
    for ids in _inputs():
        torch.testing.assert_close(
            target.hidden_hooked(ids, None, LAYERS), target.hidden(ids, None, LAYERS), rtol=0, atol=0
        )


def _collisions(fn, inputs, refs) -> list[str]:
    bad: list[str] = []

    def run(k: int) -> None:
        for _ in range(CALLS):
            try:
                if not torch.equal(fn(inputs[k], None, LAYERS), refs[k]):
                    bad.append("wrong context")
            except IndexError:
                bad.append("IndexError")

    threads = [threading.Thread(target=run, args=(k,), name=f"target-{k}") for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return bad


@pytest.mark.race
def test_race_r19_two_target_threads_collide_while_compiling_unless_hooked(target, monkeypatch):
    inputs = _inputs()
    refs = [target.hidden(ids, None, LAYERS) for ids in inputs]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _collisions(target.hidden, inputs, refs), "output capture no longer collides: r19 fixed upstream?"
    assert _collisions(target.hidden_hooked, inputs, refs) == []
