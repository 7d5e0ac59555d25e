"""Several threads each build two BlockMasks per step and run one shared compiled flex_attention.

A trainer with full and sliding-window layers builds two masks a step (sgl-project/SpecForge
`OnlineDFlashModel` since commit 8de026a7: `create_block_mask` once per layer kind); with one
drafter thread per replica, those calls and the compiled flex_attention run in several threads at
once. Each thread here does what one such step does, on CPU: `create_block_mask` twice (a
DFlash-like anchor-block mask_mod, then the same ANDed with a window), then the module-level
`torch.compile(flex_attention)` under each mask, and checks both outputs against SDPA under the
dense mask that `create_mask` evaluates from the same mask_mod. The two thread shapes compile
concurrently on the first round. Forward only: flex_attention has no backward on CPU.

A thread that raises or computes a wrong output is reported in the trainer's format
(`=== thread <name> failed: ... ===` + traceback), one still running after the deadline as hung;
exit 1 on either, 0 when every thread finished clean.

    python tests/scripts/double_block_mask.py [--threads 4] [--rounds 3]
"""

import argparse
import sys
import threading
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

BLOCK = 4
ANCHORS = 6
WINDOW = 6
HEADS, DIM = 2, 16
JOIN_S = 600.0

compiled_flex = torch.compile(flex_attention)


def mask_mod_for(anchors: torch.Tensor, seq_len: int, window: int | None):
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


def one_step(seq_len: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    anchors = torch.sort(torch.randperm(seq_len - BLOCK, generator=g)[:ANCHORS] + 1).values[None]
    q_len, kv_len = ANCHORS * BLOCK, seq_len + ANCHORS * BLOCK
    q = torch.randn(1, HEADS, q_len, DIM, generator=g)
    k = torch.randn(1, HEADS, kv_len, DIM, generator=g)
    v = torch.randn(1, HEADS, kv_len, DIM, generator=g)
    for window in (None, WINDOW):  # two create_block_mask calls per step, as with mixed layers
        mod = mask_mod_for(anchors, seq_len, window)
        block_mask = create_block_mask(mod, B=1, H=None, Q_LEN=q_len, KV_LEN=kv_len, device="cpu")
        got = compiled_flex(q, k, v, block_mask=block_mask)
        dense = create_mask(mod, 1, 1, q_len, kv_len, device="cpu")
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        err = (got - want).abs().max().item()
        if not err <= 1e-4:
            raise AssertionError(f"compiled flex differs from SDPA by {err:.3g} (window {window}, "
                                 f"seq_len {seq_len}, seed {seed})")


def worker(i: int, rounds: int, barrier: threading.Barrier, failures: list) -> None:
    try:
        for r in range(rounds):
            barrier.wait(timeout=JOIN_S)
            one_step(seq_len=32 + 16 * (i % 2), seed=1000 * i + r)
    except Exception as exc:  # noqa: BLE001 - every failure is reported, in the trainer's format
        failures.append((threading.current_thread().name, exc))
        barrier.abort()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    barrier, failures = threading.Barrier(args.threads), []
    threads = [threading.Thread(target=worker, args=(i, args.rounds, barrier, failures),
                                name=f"mask-{i}", daemon=True) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=JOIN_S)
    hung = [t.name for t in threads if t.is_alive()]
    real = [f for f in failures if not isinstance(f[1], threading.BrokenBarrierError)]
    for name, exc in real or failures:  # a broken barrier alone means a thread timed out there
        print(f"=== thread {name} failed: {type(exc).__name__}: {exc} ===", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
    for name in hung:
        print(f"=== thread {name} failed: still running after {JOIN_S:.0f} s ===", file=sys.stderr)
    if failures or hung:
        return 1
    print(f"ok: {args.threads} threads x {args.rounds} rounds, 2 block masks and 2 compiled flex "
          f"calls each, all equal to SDPA", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
