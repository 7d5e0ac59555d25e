"""compile_fn: `mode` becomes inductor options plus the known-bug workarounds, in every thread;
grad_step: what a step hands on is its own, not the CUDA-graph pool's."""

import contextlib
import types

import pytest
import torch

from dflash.config import CompileConfig
from dflash.step import INDUCTOR_WORKAROUNDS, compile_fn, grad_step


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    return seen


@pytest.mark.parametrize("mode, cudagraphs", [("default", None), ("reduce-overhead", True), ("max-autotune", True)])
def test_mode_and_workarounds_go_in_as_options(calls, mode, cudagraphs):
    compile_fn(lambda x: x, CompileConfig(mode=mode))
    (kw,) = calls
    assert "mode" not in kw and kw["backend"] == "inductor"
    assert kw["options"].get("triton.cudagraphs") == cudagraphs
    assert kw["options"]["triton.coalesce_tiling_analysis"] is False
    assert kw["options"]["triton.mix_order_reduction"] is False
    assert INDUCTOR_WORKAROUNDS.items() <= kw["options"].items()


def test_which_modes_record_cuda_graphs():
    assert [
        m
        for m in ("none", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
        if CompileConfig(mode=m).cudagraphs
    ] == ["reduce-overhead", "max-autotune"]


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


class _OverwriteOnRelease:
    """A FixSet stand-in whose lock release is followed at once by another thread's cudagraph
    replay: everything in the pool (the step's outputs and the gradients it produced) is
    overwritten with 99."""

    def __init__(self, model):
        self.outputs = []
        for p in model.parameters():  # the gradient tensors the backward produced, as produced
            p.register_post_accumulate_grad_hook(lambda p: self.outputs.append(p.grad))

    @contextlib.contextmanager
    def around_call(self, key=None):
        yield
        with torch.no_grad():
            for t in self.outputs:
                t.detach().fill_(99.0)


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_what_outlives_the_lock_is_copied_inside_it(cudagraphs):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    fs = _OverwriteOnRelease(model)

    def step_fn(x):
        y = model(x)
        out = types.SimpleNamespace(loss=y.square().mean(), correct=(y > 0).sum(0).float(), counts=torch.ones(2))
        fs.outputs += [out.loss, out.correct, out.counts]
        return out

    inputs = types.SimpleNamespace(as_args=lambda: (torch.ones(4, 3),))
    result = grad_step(step_fn, model, inputs, fs, seq=7, tokens=12, cudagraphs=cudagraphs)
    assert 0 < float(result.loss) < 99 and result.counts.tolist() == [1.0, 1.0]
    assert result.correct.max() <= 4 and (result.seq, result.tokens) == (7, 12)
    overwritten = all(bool((p.grad == 99).all()) for p in model.parameters())
    assert overwritten is not cudagraphs  # with CUDA graphs the gradients left the pool in time


def test_a_workaround_this_torch_does_not_know_is_left_out(calls, monkeypatch):
    import dflash.step

    monkeypatch.setitem(dflash.step.INDUCTOR_WORKAROUNDS, "triton.no_such_knob_in_any_torch", False)
    compile_fn(lambda x: x, CompileConfig(mode="default"))
    (kw,) = calls
    assert "triton.no_such_knob_in_any_torch" not in kw["options"]
    assert kw["options"]["triton.mix_order_reduction"] is False
