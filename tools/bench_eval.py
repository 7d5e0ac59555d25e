"""What batching the end-of-run evaluation buys: prompts one at a time against one lockstep batch.

    python -m tools.bench_eval [--preset tiny-cpu] [--prompts 16] [--new-tokens N] [--set K=V ...]

Builds the preset's target and an untrained drafter on the preset's first devices (an untrained
drafter accepts almost nothing, so every prompt runs the most rounds: the slow case, and the one
a short run meets), draws random prompts as long as the corpus's prompt parts, and times
`acceptance_length` with batch 1 and with every prompt in one batch, in one process, after one
untimed warm-up of each. Prints both times, their ratio, and whether the two gave the same tau
(they must: each row's output is the target's greedy choice either way).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from dflash import presets
from dflash.config import ConfigError, apply_overrides
from dflash.trainer_errors import DevicePlanError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_eval", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny-cpu")
    p.add_argument("--prompts", type=int, default=None, help="default: the preset's train.eval_prompts")
    p.add_argument("--new-tokens", type=int, default=None, help="default: the preset's train.eval_new_tokens")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each, the median is printed (default 3)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="K=V")
    opts = p.parse_args(argv)
    # torch and the modules that import it: `--help` and a bad argument answer without them
    import torch

    from dflash.devices import resolve  # imports torch
    from dflash.evaluate import acceptance_length  # imports torch
    from dflash.models import build_models  # imports torch

    try:
        cfg = apply_overrides(presets.get(opts.preset), opts.sets)
        plan = resolve(cfg.devices, num_target_threads=1, num_drafter_threads=1)
    except (ConfigError, DevicePlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = opts.prompts if opts.prompts is not None else (cfg.train.eval_prompts or 16)
    new = opts.new_tokens if opts.new_tokens is not None else cfg.train.eval_new_tokens
    if n < 1 or new < 1 or opts.repeats < 1:
        print("error: --prompts, --new-tokens and --repeats must be >= 1", file=sys.stderr)
        return 2
    models = build_models(cfg, plan)
    target, obj = models.targets[plan.target[0]], models.objectives[0].to(plan.target[0])
    g = torch.Generator().manual_seed(0)
    lo, hi = max(1, cfg.data.synthetic_min_len // 2), max(2, cfg.data.synthetic_max_len // 2)
    prompts = [
        torch.randint(1, models.vocab_size, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]

    def timed(batch: int) -> tuple[float, float]:
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        t0 = time.perf_counter()
        tau = acceptance_length(target, obj, prompts, new, batch=batch)
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        return time.perf_counter() - t0, tau

    timed(1), timed(n)  # warm-up: allocator, kernels, autotuning
    one = [timed(1) for _ in range(opts.repeats)]
    all_ = [timed(n) for _ in range(opts.repeats)]
    t1, tn = statistics.median(t for t, _ in one), statistics.median(t for t, _ in all_)
    same = {tau for _, tau in one} == {tau for _, tau in all_}
    print(
        f"{opts.preset} on {target.device} (torch {torch.__version__}): {n} prompts x {new} new tokens, "
        f"tau {one[0][1]:.3f}; one at a time {t1:.2f}s, one batch {tn:.2f}s: {t1 / tn:.2f}x; "
        f"same tau: {'yes' if same else 'NO'} (median of {opts.repeats})"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
