"""Synchronous replicas: M drafter threads train exactly what one thread accumulating M batches does.

The reference below is written independently of dflash.replicas: one objective, plain
autograd accumulation over batches seq = step*M + m (in seq order), mean, clip, AdamW.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from small_run import small_config

from dflash.batch import HiddenBatch
from dflash.collate import collate
from dflash.config import PipelineConfig
from dflash.replicas import broadcast_params, warmup_cosine
from dflash.step import make_inputs
from dflash.train import Trainer, train

STEPS = 3


def with_threads(cfg, *, k: int, n: int, m: int):
    pipe = dataclasses.replace(cfg.pipeline, num_prefetch_threads=k, num_target_threads=n, num_drafter_threads=m)
    return dataclasses.replace(cfg, pipeline=pipe)


def reference_params(cfg) -> dict[str, torch.Tensor]:
    """One thread, no pipeline: accumulate M batches per step, then one AdamW step."""
    tr = Trainer(cfg)
    prep = tr.prepare()
    num_rep = cfg.pipeline.num_drafter_threads
    objective = prep.models.objectives[0]
    target = next(iter(prep.models.targets.values()))
    params = list(objective.drafter.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.train.steps, cfg.train.warmup_ratio))
    for step in range(cfg.train.steps):
        objective.drafter.zero_grad(set_to_none=True)
        for m in range(num_rep):
            seq = step * num_rep + m
            epoch, batch = prep.planner.get(seq)
            tb = collate(prep.train_ds, batch, seq, epoch)
            ctx = target.hidden(tb.input_ids, None, prep.models.layer_ids)
            inputs = make_inputs(
                HiddenBatch(tokens=tb, context=ctx),
                cfg.drafter,
                seed=cfg.train.seed,
                device=torch.device("cpu"),
                dtype=torch.float32,
            )
            objective(*inputs.as_args()).loss.backward()  # autograd accumulates in seq order
        for p in params:
            p.grad.div_(num_rep)
        torch.nn.utils.clip_grad_norm_(params, cfg.train.grad_clip)
        opt.step()
        sched.step()
    return {k: v.detach().clone() for k, v in objective.drafter.state_dict().items()}


def test_two_replica_threads_equal_one_thread_accumulating(tmp_path):
    cfg = with_threads(small_config(tmp_path / "a", steps=STEPS), k=1, n=1, m=2)
    threaded = train(cfg)
    assert threaded.exit_code == 0, threaded.pipeline.report()
    ref = reference_params(
        dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out_dir=str(tmp_path / "ref")))
    )
    got = threaded.state["drafter"]
    assert got.keys() == ref.keys()
    moved = 0
    for name, value in ref.items():
        assert torch.allclose(got[name], value, rtol=1e-5, atol=1e-6), name
        moved += int(not torch.equal(value, threaded_initial(cfg)[name]))
    assert moved > 0, "training did not change any parameter: the comparison proves nothing"


_INITIAL: dict = {}


def threaded_initial(cfg) -> dict[str, torch.Tensor]:
    if "state" not in _INITIAL:
        _INITIAL["state"] = Trainer(cfg).prepare().models.objectives[0].drafter.state_dict()
    return _INITIAL["state"]


@pytest.mark.parametrize("k,n", [(2, 1), (1, 3), (3, 2)])
def test_prefetch_and_target_thread_counts_do_not_change_the_result(tmp_path, k, n):
    base = train(with_threads(small_config(tmp_path / "base", steps=STEPS), k=1, n=1, m=2))
    other = train(with_threads(small_config(tmp_path / "other", steps=STEPS), k=k, n=n, m=2))
    assert base.exit_code == other.exit_code == 0
    for name, value in base.state["drafter"].items():
        assert torch.equal(other.state["drafter"][name], value), name


def test_broadcast_copies_in_place_keeping_addresses():
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    ptrs = [p.data_ptr() for p in b.parameters()]
    broadcast_params([a, b])
    assert [p.data_ptr() for p in b.parameters()] == ptrs
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_warmup_cosine_schedule_shape():
    f = warmup_cosine(100, 0.04)
    assert [round(f(s), 4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(52) == pytest.approx(0.5, abs=0.02)
    assert 0 < f(99) < 0.01
    assert all(f(s) >= f(s + 1) for s in range(4, 99))
    assert warmup_cosine(10, 0.0)(0) == pytest.approx(1.0)
    assert not math.isnan(warmup_cosine(1, 0.5)(0))


def test_pipeline_config_rejects_zero_threads():
    with pytest.raises(ValueError):
        PipelineConfig(num_drafter_threads=0)


POLICY_FIXES = (
    "sequential-startup",
    "thread-local-warmup",
    "persistent-buffers",
    "graph-isolation",
    "global-lock",
    "nested-fx-fallback",
)


@pytest.mark.slow
def test_fix_policies_act_and_do_not_change_what_is_learned(tmp_path):
    """Compiled (eager backend) with every pipeline-level fix vs plain eager: same parameters."""
    plain = train(small_config(tmp_path / "plain", steps=STEPS))
    cfg = small_config(tmp_path / "fixed", steps=STEPS)
    cfg = dataclasses.replace(
        cfg, fixes=POLICY_FIXES, compile=dataclasses.replace(cfg.compile, mode="default", backend="eager")
    )
    fixed = train(cfg)
    assert plain.exit_code == fixed.exit_code == 0, fixed.pipeline.report()
    counts = fixed.final["fix_counts"]
    assert counts["sequential-startup"] == 2  # one first call per drafter thread
    assert counts["thread-local-warmup"] == 2
    assert counts["graph-isolation"] >= 2
    assert counts["global-lock"] > 0
    assert counts["persistent-buffers"] == 2 * STEPS  # one buffer fill per batch
    for name, value in plain.state["drafter"].items():
        assert torch.allclose(fixed.state["drafter"][name], value, rtol=1e-4, atol=1e-5), name
