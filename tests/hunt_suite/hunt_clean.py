"""A clean test: each thread builds, calls and checks a module of its own; nothing traced."""

import torch
import torch.nn as nn


def test_eager_modules_of_their_own():
    torch.manual_seed(0)  # torch's generator is shared, so only the shapes are compared
    m, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(4, 8)
    for _ in range(50):
        y = m(x)
        assert y.shape == (4, 2)
        assert torch.isfinite(y).all()
