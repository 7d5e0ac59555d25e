"""r25_double_block_mask: threads build two BlockMasks a step beside one shared compiled flex_attention.

Symptom: none seen (see Affected versions). Looked for: a compiled flex_attention output that
  differs from SDPA under the dense mask of the same mask_mod (a block mask or compiled graph of one
  thread or one layer kind used for another's), an exception in a thread from `create_block_mask`
  or the compiled call, and a hang (reported, but on a cold inductor cache g++ alone can outlast
  the harness's 60 s hang rule on a loaded 2-core machine).
Mechanism: suspected, not shown. A trainer with full and sliding-window layers builds two masks a
  step (sgl-project/SpecForge commit 8de026a7, `OnlineDFlashModel.forward` in
  specforge/algorithms/common/dflash_family_model.py: `create_dflash_block_mask` once per layer
  kind); with one drafter thread per replica those `create_block_mask` calls (vmap over the
  mask_mod) and the first calls of one process-wide `torch.compile(flex_attention)` (Dynamo
  guards on each mask_mod closure: each layer kind is its own graph, a second context length
  recompiles) run in several threads at once. The seeds' DFlash trainer switched to all sliding-window layers after
  trouble it put down to these double calls.
Trigger: --threads threads (two context lengths, 32 and 48), --rounds rounds in step through a
  barrier, so the first rounds compile concurrently; per round `create_block_mask` twice (the
  DFlash anchor-block mask_mod, then the same ANDed with a sliding window), the module-level
  compiled flex_attention under each, each output checked against SDPA with `create_mask`'s dense
  mask. Forward only: flex_attention has no backward on CPU.
Affected versions: none seen. Through the harness (CPU, 2026-12-02): 2.13.0 0/10 plain and 0/10
  under switch, 2.14.1 and 2.15.0 0/10 under switch each; every trial 24/24 outputs equal to SDPA
  while the F10 window (concurrent compiles of the one function) opened 16-18 times.
Fix: none needed while it does not reproduce; `--fix global-lock` puts each mask build and
  compiled call under one lock (no harness cell measures it).
Upstream: no pytorch issue found for the double-mask pattern, which is sgl-project/SpecForge commit
  8de026a7 ("dflash sliding window layer support"); the concurrent compiles it meets are F10's (r11:
  PR #195355, #118260).
"""

import argparse
import sys
import threading

from _common import beat, run_threads, setup

BLOCK, ANCHORS, WINDOW = 4, 6, 6
HEADS, DIM = 2, 16
TOLERANCE = 1e-4


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=4, help="threads stepping together")
    p.add_argument("--rounds", type=int, default=3, help="steps per thread (two masks each)")
    args, fs = setup(p)
    if args.threads < 2:
        p.error("--threads must be >= 2")
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

    torch.set_num_threads(1)
    # One compiled flex_attention for the process, as transformers' and SpecForge's wrappers keep it.
    compiled_flex = torch.compile(flex_attention)

    def mask_mod_for(anchors, seq_len, window):
        """The DFlash training rule (context < anchor, own block bidirectional), optionally windowed."""

        def mask_mod(b, h, q_idx, kv_idx):
            blk = q_idx // BLOCK
            anchor = anchors[b, blk]
            is_ctx = kv_idx < seq_len
            ok = (is_ctx & (kv_idx < anchor)) | (~is_ctx & ((kv_idx - seq_len) // BLOCK == blk))
            if window is not None:
                q_pos = anchor + q_idx % BLOCK
                kv_pos = torch.where(is_ctx, kv_idx, anchor + (kv_idx - seq_len) % BLOCK)
                ok = ok & (q_pos - kv_pos < window) & (kv_pos - q_pos < window)
            return ok

        return mask_mod

    barrier = threading.Barrier(args.threads)
    lock, wrong, checked = threading.Lock(), [], [0]

    def step(seq_len, seed):
        g = torch.Generator().manual_seed(seed)
        anchors = torch.sort(torch.randperm(seq_len - BLOCK, generator=g)[:ANCHORS] + 1).values[None]
        q_len, kv_len = ANCHORS * BLOCK, seq_len + ANCHORS * BLOCK
        q, k, v = (torch.randn(1, HEADS, n, DIM, generator=g) for n in (q_len, kv_len, kv_len))
        for window in (None, WINDOW):  # full then sliding layers: two masks a step
            mod = mask_mod_for(anchors, seq_len, window)
            with fs.around_call():
                block_mask = create_block_mask(mod, B=1, H=None, Q_LEN=q_len, KV_LEN=kv_len, device="cpu")
                got = compiled_flex(q, k, v, block_mask=block_mask)
            dense = create_mask(mod, 1, 1, q_len, kv_len, device="cpu")
            want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
            err = (got - want).abs().max().item()
            with lock:
                checked[0] += 1
                if not err <= TOLERANCE:  # also true for NaN
                    wrong.append((threading.current_thread().name, window, seq_len, seed, err))
            beat()

    def worker(i):
        def body():
            fs.thread_start("mask")
            try:
                for r in range(args.rounds):
                    barrier.wait()
                    step(seq_len=32 + 16 * (i % 2), seed=1000 * i + r)
            except threading.BrokenBarrierError:
                return  # another thread failed first and broke the barrier; its error is reported
            except BaseException:
                barrier.abort()
                raise

        return body

    errors = run_threads({f"repro-mask-{i}": worker(i) for i in range(args.threads)}, deadline_s=100)
    calls = args.threads * args.rounds * 2
    graphs = counters["stats"]["unique_graphs"]
    if errors:
        name, first = next(iter(errors.items()))
        print(f"failed in {len(errors)}/{args.threads} threads, first {name}")
        print(f"REPRODUCED: {type(first).__name__}: {first}")
        return 1
    if wrong:
        name, window, seq_len, seed, err = wrong[0]
        print(
            f"WRONG_RESULT: block-mask: compiled flex_attention differs from SDPA in {len(wrong)}/{checked[0]} "
            f"outputs (first: {name}, window {window}, context {seq_len}, seed {seed}, max abs diff {err:.3g})"
        )
        return 1
    print(
        f"NOT REPRODUCED (outputs equal to SDPA: {checked[0]}/{calls}, {args.threads} threads x {args.rounds} "
        f"rounds x 2 masks; Dynamo graphs compiled: {graphs})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
