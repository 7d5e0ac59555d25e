"""compile_fn: `mode` becomes inductor options plus the known-bug workarounds, in every thread."""

import pytest
import torch

from dflash.config import CompileConfig
from dflash.step import INDUCTOR_WORKAROUNDS, compile_fn


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    return seen


@pytest.mark.parametrize("mode, cudagraphs", [("default", None), ("reduce-overhead", True),
                                              ("max-autotune", True)])
def test_mode_and_workarounds_go_in_as_options(calls, mode, cudagraphs):
    compile_fn(lambda x: x, CompileConfig(mode=mode))
    (kw,) = calls
    assert "mode" not in kw and kw["backend"] == "inductor"
    assert kw["options"].get("triton.cudagraphs") == cudagraphs
    assert kw["options"]["triton.coalesce_tiling_analysis"] is False
    assert kw["options"]["triton.mix_order_reduction"] is False
    assert INDUCTOR_WORKAROUNDS.items() <= kw["options"].items()


def test_workarounds_can_be_switched_off_and_other_backends_get_no_options(calls):
    compile_fn(lambda x: x, CompileConfig(mode="reduce-overhead", inductor_workarounds=False))
    compile_fn(lambda x: x, CompileConfig(mode="default", backend="aot_eager"))
    assert calls[0]["options"] == {"triton.cudagraphs": True}
    assert "options" not in calls[1] and "mode" not in calls[1]


def test_the_options_compile_and_run_with_inductor_on_cpu():
    torch._dynamo.reset()
    fn = compile_fn(lambda x: (x * 2).sum(dim=-1), CompileConfig(mode="default"))
    x = torch.arange(12.0).reshape(3, 4)
    # compile_threads=1: no compile worker pool, whose threads outlive the test (conftest).
    with torch._inductor.config.patch(compile_threads=1):
        torch.testing.assert_close(fn(x), (x * 2).sum(dim=-1))
