"""dflash.adamw: torch's AdamW arithmetic and state, without importing torch._dynamo."""

from __future__ import annotations

import copy

import pytest
import torch

from dflash.adamw import AdamW
from dflash.replicas import warmup_cosine


def _train(opt_cls, steps: int, state: dict | None = None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    opt = opt_cls(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(10, 0.2))
    if state is not None:
        state = copy.deepcopy(state)  # a loaded optimizer updates the dict's own tensors in place
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
    gen = torch.Generator().manual_seed(len(state or ()))
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 8, generator=gen)).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return model, {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            _same(a[k], b[k])
        elif isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_the_same_parameters_and_state_as_torchs_adamw():
    _, ours = _train(AdamW, 6)
    _, torchs = _train(torch.optim.AdamW, 6)
    _same(ours, torchs)


@pytest.mark.parametrize(
    "first, then", [(AdamW, torch.optim.AdamW), (torch.optim.AdamW, AdamW)], ids=["ours-torchs", "torchs-ours"]
)
def test_a_state_dict_resumes_in_the_other(first, then):
    _, state = _train(first, 3)
    _, resumed = _train(then, 3, state)
    _, straight = _train(torch.optim.AdamW, 3, state)
    _same(resumed, straight)


def test_the_step_leaves_grad_mode_as_it_found_it():
    p = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([p], lr=0.1)
    p.grad = torch.ones(3)
    with torch.enable_grad():
        opt.step()  # in grad mode, an in-place update of a leaf that requires grad would raise
        assert torch.is_grad_enabled()
    assert not torch.equal(p.detach(), torch.ones(3))
