"""A deterministic failure: a wrong expectation fails in one thread as in four (not a race)."""

import torch


def test_wrong_expectation():
    total = torch.arange(4).sum().item()
    assert total == 7, f"expected 7, got {total}"
