"""One drafter micro-step: inputs to device, anchors, compiled forward, backward.

Each drafter thread compiles its own callable (`compile_step`), so no compiled graph is shared
between threads (F1c: one cudagraph-tree graph replayed from two threads). Anchors are sampled
on the CPU outside the compiled region with a generator seeded by (train.seed, batch.seq), so a
batch yields the same anchors whichever thread or device trains it (replica equivalence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dflash.anchors import sample_anchors
from dflash.batch import HiddenBatch
from dflash.config import CompileConfig, DrafterConfig
from harness.runtime.failpoints import fault_point, fault_value
from harness.runtime.fixes import call_key

# Large odd multiplier: distinct (seed, seq) pairs give distinct generator seeds.
_SEED_STRIDE = 1_000_003


@dataclass(slots=True)
class StepInputs:
    """Device tensors of one batch, in the order the objective takes them."""

    input_ids: torch.Tensor  # [B, L] int64
    loss_mask: torch.Tensor  # [B, L]
    context: torch.Tensor  # [B, L, k*H]
    anchors: torch.Tensor  # [B, N] int64
    keep: torch.Tensor  # [B, N] bool
    doc_ids: torch.Tensor | None = None  # [B, L] int64, packed rows only

    def as_args(self) -> tuple[torch.Tensor, ...]:
        args = (self.input_ids, self.loss_mask, self.context, self.anchors, self.keep)
        return args if self.doc_ids is None else (*args, self.doc_ids)


@dataclass(slots=True)
class StepResult:
    """Detached outcome of one micro-step (gradients stay in the replica's .grad)."""

    seq: int
    loss: torch.Tensor  # scalar
    correct: torch.Tensor  # [B_s - 1]
    counts: torch.Tensor  # [B_s - 1]
    tokens: int


def anchor_generator(seed: int, seq: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed * _SEED_STRIDE + seq)


def make_inputs(
    hb: HiddenBatch, dcfg: DrafterConfig, *, seed: int, device: torch.device, dtype: torch.dtype
) -> StepInputs:
    """Move a hidden batch to the drafter device and sample its anchors (CPU, seeded by seq)."""
    tok = hb.tokens
    # Sample on the unpadded [rows, bucket] view: the draw depends on the tensor shape, so a
    # batch padded to a fixed shape (persistent-buffers) must still get the same anchors.
    rows = len(tok.indices)
    anchors, keep = sample_anchors(
        tok.loss_mask[:rows, : tok.bucket].cpu(),
        tok.lengths[:rows].cpu(),
        dcfg.num_anchors,
        dcfg.block_size,
        anchor_generator(seed, tok.seq),
    )
    extra = tok.input_ids.shape[0] - rows
    if extra:  # padding rows: no anchors kept, so they add nothing to the loss
        anchors = torch.cat([anchors, anchors.new_zeros((extra, anchors.shape[1]))])
        keep = torch.cat([keep, keep.new_zeros((extra, keep.shape[1]))])
    # Only a batch of packed rows carries document ids (TokenBatch.doc_ids, from the data's
    # doc_ids column); without them the step is as before.
    doc_ids = getattr(tok, "doc_ids", None)
    return StepInputs(
        input_ids=tok.input_ids.to(device),
        loss_mask=tok.loss_mask.to(device),
        context=hb.context.to(device=device, dtype=dtype),
        anchors=anchors.to(device),
        keep=keep.to(device),
        doc_ids=None if doc_ids is None else doc_ids.to(device),
    )


def compile_step(objective: nn.Module, ccfg: CompileConfig, fs) -> Callable:
    """The callable a drafter thread runs: objective.forward, isolated and compiled per config."""
    fn = objective.forward
    if fs.active("graph-isolation"):
        fn = fs.isolate(fn)
    fault_point("drafter.before_compile")
    if ccfg.mode != "none":
        fn = compile_fn(fn, ccfg)
    fault_point("drafter.after_compile")
    return fn


INDUCTOR_WORKAROUNDS = {
    # torch 2.11 + CUDA: the coalesce tiling analysis asserts in get_pw_red_splits on the
    # drafter's fused loss kernels once shapes go dynamic ("InductorError: AssertionError" in
    # tiling_utils; pytorch#181563, fixed by #181793; #197077 open). It failed every compiled
    # H200 trial of results/gpu-diag (6/6), with one drafter thread as with three: a compiler
    # bug, not a race. The analysis only tunes tiling; CPU codegen never runs it.
    "triton.coalesce_tiling_analysis": False,
    # torch 2.11 + CUDA, dynamic shapes: the mix-order reduction of a norm backward (rnumel 64,
    # the per-head q_norm/k_norm of gpu-gpu-bound) slices its workspace as
    # `0 * 64*s18 + n * 64 : (0 + 1) * 64*s18 + n * 64` (nsplit, a sum, printed without
    # parentheses), so `.view(nsplit, 64)` fails: "shape '[2352, 64]' is invalid for input of
    # size 1344" (pytorch#174379, fixed by #176008). 21 gpu-gpu-bound H200 trials failed on it
    # (results/gpu-campaign, gpu-shape, gpu-shape2), one thread per stage as with three: a
    # compiler bug, not a race. Off, a norm backward's two reductions run as two kernels instead
    # of one; CPU codegen never runs it.
    "triton.mix_order_reduction": False,
}


def compile_fn(fn: Callable, ccfg: CompileConfig) -> Callable:
    if ccfg.backend != "inductor":
        # `mode` means something only to inductor; other backends would warn and ignore it.
        return torch.compile(fn, backend=ccfg.backend, dynamic=ccfg.dynamic)
    return torch.compile(fn, backend="inductor", options=inductor_options(ccfg), dynamic=ccfg.dynamic)


def inductor_options(ccfg: CompileConfig) -> dict:
    """The options `mode` stands for, plus INDUCTOR_WORKAROUNDS (torch.compile takes mode or
    options, not both). Passed per compiled function, so they hold in every thread: on torch
    2.13 a config value set in one thread is invisible to the others (F14)."""
    # torch._inductor loads torch._dynamo (seconds): an eager run never needs it
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(ccfg.mode, ccfg.dynamic))
    if ccfg.inductor_workarounds:
        # Only the options this torch has: torch.compile rejects an unknown one, and a workaround
        # for a bug of one version must not stop every compile on another that lacks the knob.
        known = torch._inductor.config.get_config_copy()
        options.update({k: v for k, v in INDUCTOR_WORKAROUNDS.items() if k in known})
    return options


def grad_step(
    step_fn: Callable,
    replica: nn.Module,
    inputs: StepInputs,
    fs,
    *,
    seq: int = -1,
    tokens: int = 0,
    cudagraphs: bool = False,
) -> StepResult:
    """Forward + backward of one batch into `replica`'s .grad (which is reset first).

    The result and, with `cudagraphs`, the gradients are copies made before the fixes' lock is
    released: with CUDA graphs the loss, the accuracy counts and the gradients (AccumulateGrad
    keeps the backward's output tensor as .grad) live in the cudagraph tree's memory pool, and
    the next replay of that tree overwrites them; when threads share a tree (a C-stash TLS init
    without graph-isolation) that replay is another thread's and comes before the replica leader
    reads them. H200, torch 2.11: 3/3 launch-bound global-lock+cstash-tls-init+cublas-handle-init
    trials failed reading a loss "accessing tensor output of CUDAGraphs that has been overwritten
    by a subsequent run" in ReplicaGroup.sync (docs/log/2026-11-30-launch-bound-verdict.md);
    PyTorch's CUDA-graph-trees notes ask callers to clone outputs they keep past the next
    invocation.
    """
    # set_to_none: reduce-overhead replays must not see a stale grad buffer from the last step.
    replica.zero_grad(set_to_none=True)
    fault_point("drafter.before_forward")
    args = inputs.as_args()
    with fs.around_call(call_key(step_fn, *args)):
        out = fault_value("drafter.after_forward", step_fn(*args))
        fault_point("drafter.before_backward")
        out.loss.backward()
        fault_point("drafter.after_backward")
        result = StepResult(
            seq=seq,
            loss=out.loss.detach().clone(),
            correct=out.correct.detach().clone(),
            counts=out.counts.detach().clone(),
            tokens=tokens,
        )
        if cudagraphs:
            for p in replica.parameters():
                if p.grad is not None:
                    p.grad = p.grad.clone()
    return result
