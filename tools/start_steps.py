"""Where a preset's target load goes, one step at a time, in a fresh process.

    python -m tools.start_steps [--preset gpu-default] [--impl transformers|native]

Times, one after another: torch's import, the trainer's, the device's first touch and first real
allocation (CUDA only), transformers' import (target.impl=transformers only), the trainer's own
build of the synthetic target (seeded on the CPU, then moved to the device in the target dtype),
two forwards of one batch, the trainer's optimizer (dflash.adamw), and then torch._dynamo's
import, which torch.optim's own AdamW pays on its first call. Run it in a fresh process on a fresh
host to see a first start; the trainer's own `timeline:` line gives the phases around it. The
target must be the embedded synthetic one (no target.path).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402  (the clock starts before any import)

from dflash import presets  # noqa: E402  (light: no torch)


class Steps:
    """Prints each step's seconds and the time since the process's clock started."""

    def __init__(self) -> None:
        self.last = T0

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        print(f"{name:42s} {now - self.last:7.2f}s  (at {now - T0:6.2f}s)", flush=True)
        self.last = now


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.start_steps", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpu-default")
    p.add_argument("--impl", choices=("transformers", "native"), help="target.impl (default: the preset's)")
    a = p.parse_args(argv)
    steps = Steps()
    # each import is a step this tool times: none may happen before its clock
    import torch

    steps.mark("import torch")
    # timed: the trainer's own imports, as `python -m dflash train` has them
    import dflash.train  # noqa: F401
    from dflash import target

    steps.mark("import the trainer")
    cfg = presets.get(a.preset)
    if a.impl is not None:
        cfg.target.impl = a.impl
    device = torch.device(cfg.devices.target_devices[0])
    _touch(torch, device, steps)
    if cfg.target.impl == "transformers":
        # timed: transformers' import is the step this tool was written to see
        from transformers import LlamaForCausalLM, Qwen3ForCausalLM  # noqa: F401

        steps.mark("import transformers' model classes")
    model = target._build_hf_model(cfg.target, device)
    _sync(torch, device)
    steps.mark(f"seeded build, on {device} in {cfg.target.dtype}")
    ids = torch.randint(1, cfg.target.vocab_size, (8, 128), device=device)
    with torch.no_grad():
        for which in ("first", "second"):
            model(ids)
            _sync(torch, device)
            steps.mark(f"{which} forward [8, 128]")
    _optimizer_steps(torch, device, steps)
    return 0


def _optimizer_steps(torch, device, steps: Steps) -> None:
    from dflash.adamw import AdamW  # imports torch, which no import before the clock may

    p = torch.nn.Parameter(torch.zeros(1, device=device))
    p.grad = torch.ones_like(p)
    AdamW([p]).step()
    _sync(torch, device)
    steps.mark("the trainer's optimizer, one step")
    # what torch.optim.AdamW's first call adds, unless an import before it paid (transformers')
    import torch._dynamo  # noqa: F401

    steps.mark("import torch._dynamo")


def _touch(torch, device, steps: Steps) -> None:
    if device.type != "cuda":
        return
    torch.empty(0, device=device)
    steps.mark("CUDA context (torch.empty(0))")
    torch.ones(1 << 20, device=device)
    _sync(torch, device)
    steps.mark("first real allocation + sync")


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    raise SystemExit(main())
