"""r21_inductor_mix_order_workspace: a norm backward's mix-order reduction slices its workspace short.

Symptom: `RuntimeError: shape '[5120, 64]' is invalid for input of size 4096` (or
  `'[2352, 64]' ... 1344`) raised in Inductor's generated wrapper, on the line
  `workspace_N[idx * nsplit * rnumel : ...].view(nsplit, rnumel).sum(dim=0)` that follows a
  mix-order reduction kernel, in the backward of an RMSNorm compiled with dynamic shapes.
Mechanism: not a race (one thread is enough). Inductor fuses an RMSNorm backward's two
  reductions (over the head dim for grad_x, over the rows for grad_weight) into one mix-order
  kernel that leaves nsplit partial sums per column in a workspace, then sums them in the
  wrapper. 2.11 prints the slice bounds as `{idx} * {nsplit} * {rnumel}`; when the row count is
  batch * (context + 16 * anchors), the multiple of the split size is pulled out of the ceiling
  and nsplit prints as a sum (`64*s18 + math.floor(127/128 + (1/16)*s18*s7)`), so operator
  precedence makes the slice only 64*s18 elements long, not nsplit * rnumel: `.view` fails.
Trigger: the trainer's per-head k_norm (gpu-gpu-bound drafter: 8 KV heads of head_dim 64 =
  rnumel 64, keys over [context; 64 anchors x 16 block rows], hidden 1024), compiled with
  dynamic=True in one thread (coalesce_tiling_analysis off, as in the trainer: #181563
  asserts first otherwise), forward + backward over --shapes (batch x context length; the
  defaults are the two faces of results/gpu-shape2 and results/gpu-shape). On the H200 (2.11)
  it failed 21 gpu-gpu-bound trainer trials (results/gpu-campaign, gpu-shape, gpu-shape2), with
  one thread per pipeline stage as with three. This script has not reproduced it: 0/20 on 2.11
  (docs/log/2026-12-01-r21-mix-order-repro.md).
Affected versions: 2.11 + CUDA (Triton backend only; CPU codegen never fuses mix-order
  reductions); 2.13 parenthesises the bounds.
Fix: none in harness.runtime.fixes (it is not a race); --no-mix-order compiles with
  `options={"triton.mix_order_reduction": False}`, the trainer's workaround (dflash/step.py
  INDUCTOR_WORKAROUNDS): the two reductions run as two kernels.
Upstream: #174379 (the bug), #176008 (the fix).
"""

import argparse
import sys
import threading
import traceback

from _common import beat, run_threads, setup


def need_cuda(torch):
    if not torch.cuda.is_available():
        print("SKIP: needs CUDA")
        sys.exit(0)


# The tail of `.view(nsplit, rnumel)`'s error on the short slice (harness family mix-order).
SIGNATURE = "is invalid for input of size"


def parse_shapes(text):
    """ "64x256,21x768" -> [(64, 256), (21, 768)] (batch x context length)."""
    try:
        shapes = [tuple(int(n) for n in item.split("x")) for item in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 2 for s in shapes):
        raise argparse.ArgumentTypeError(f"expected BxS[,BxS...] with sizes >= 2, got {text!r}")
    return shapes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--shapes",
        type=parse_shapes,
        default="64x256,21x768",
        help="batch x context length per step (default: the two stored trainer faces)",
    )
    p.add_argument("--anchors", type=int, default=64, help="anchor blocks of 16 rows after the context")
    p.add_argument(
        "--no-mix-order",
        action="store_true",
        help="compile with triton.mix_order_reduction=False (the known workaround)",
    )
    args, fs = setup(p)
    import torch

    need_cuda(torch)
    hidden, heads, head_dim, block = 1024, 8, 64, 16  # gpu-gpu-bound's drafter k path
    hits, done = [], []

    class KeyNorm(torch.nn.Module):
        """k_proj over [context; block rows], then the per-head RMSNorm (rnumel = head_dim)."""

        def __init__(self):
            super().__init__()
            self.k_proj = torch.nn.Linear(hidden, heads * head_dim, bias=False)
            self.weight = torch.nn.Parameter(torch.ones(head_dim))

        def forward(self, ctx, blk):
            b = ctx.shape[0]
            # Each anchor row opens a block of 16 rows; the block size is a Python constant (the
            # trainer's torch.arange(block_size)), so under dynamic=True the row count is
            # B * (S + 16 * A): its 16 * A * B part is a multiple of the split size, the
            # ceiling pulls it out, and nsplit prints as a sum.
            rows = blk[:, :, None, :].expand(-1, -1, block, -1).flatten(1, 2)
            kv = torch.cat([ctx, rows], dim=1)
            k = self.k_proj(kv).view(b, kv.shape[1], heads, head_dim).float()
            k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (self.weight * k).square().mean()

    def worker():
        fs.thread_start("train")
        model = KeyNorm().cuda()
        # The tiling analysis asserts first on these shapes (2.11, pytorch#181563): off, as in
        # the trainer (dflash/step.py INDUCTOR_WORKAROUNDS), so the mix-order bug is reached.
        options = {"triton.coalesce_tiling_analysis": False}
        if args.no_mix_order:
            options["triton.mix_order_reduction"] = False
        step = torch.compile(fs.isolate(model.forward), dynamic=True, options=options)
        for b, s in args.shapes:
            ctx = torch.randn(b, s, hidden, device="cuda", requires_grad=True)
            blk = torch.randn(b, args.anchors, hidden, device="cuda", requires_grad=True)
            model.zero_grad(set_to_none=True)
            try:
                with fs.around_call():
                    step(ctx, blk).backward()
                torch.cuda.synchronize()
            except RuntimeError as exc:
                if SIGNATURE not in str(exc):
                    raise
                hits.append((threading.current_thread().name, exc))
                continue
            done.append(f"{b}x{s}")
            beat()

    errors = run_threads({"repro-train": worker}, deadline_s=480)
    if hits:
        name, first = hits[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(f"failed shapes: {len(hits)}/{len(args.shapes)}")
        print(f"REPRODUCED: RuntimeError: {str(first).splitlines()[0]}")
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(
        f"NOT REPRODUCED (shapes {', '.join(done)} ran forward + backward, "
        f"mix_order_reduction={not args.no_mix_order}, torch {torch.__version__})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
