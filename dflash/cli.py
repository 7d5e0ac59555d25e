"""`python -m dflash train|bench|plan|prepare|export`: argument parsing and the exit-code contract.

Exit codes (docs/DESIGN.md, workload process): 0 ok; 1 a thread failed (one
`=== thread <name> failed: ... ===` report per failed thread on stderr); 2 bad input (one line
`error: ...` on stderr, nothing written); 3 wrong result (`WRONG_RESULT: ...`); 4 stalled (no
optimizer step for train.stall_s: a `STALLED: ...` headline naming where each thread is, every
thread's stack in <out_dir>/stall-dump.txt; dflash.watchdog); 130/143 after SIGINT/SIGTERM
(checkpoint written; within about 10 s even if a thread is stuck in a compile, which is then
named and left behind).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import sys
import threading
from collections.abc import Iterator

from dflash import bytecode, cuda_context, presets
from dflash.config import RunConfig, apply_overrides, from_dict
from dflash.plan import run as plan_text
from dflash.prepare import main as prepare_main
from harness.runtime.errors import UserInputError
from harness.runtime.fixes import parse_names


class CommandLineError(UserInputError):
    """Bad command line (unknown flag, missing argument)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise CommandLineError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m dflash", description="DFlash drafter trainer")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, helptext in (("train", "train a drafter"), ("bench", "measure throughput")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("--preset", default=presets.DEFAULT_PRESET, help=f"one of: {', '.join(presets.PRESETS)}")
        sp.add_argument("--steps", type=int, default=None, help="optimizer steps (train.steps)")
        _add_overrides(sp)
        if name == "train":
            sp.add_argument("--out", default=None, help="output folder (train.out_dir)")
        else:
            _add_bench_flags(sp)
    _add_plan(sub)
    # `prepare` is dispatched before parsing (dflash.prepare owns its flags); listed for --help.
    sub.add_parser("prepare", help="tokenize JSON lines: prepare IN.jsonl --tokenizer DIR --out F")
    exp = sub.add_parser("export", help="export a checkpoint in the z-lab HF layout")
    exp.add_argument("--checkpoint", required=True, help="run dir, checkpoints dir or step dir")
    exp.add_argument("--out", required=True, help="export folder (must not exist)")
    return p


def _add_overrides(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="K=V",
        help="config override section.field=value (repeatable)",
    )


def _add_bench_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="measured runs, alternating fault points absent/idle (default 4; 1 = absent only, no warm-up round)",
    )
    sp.add_argument(
        "--oracle-every",
        type=int,
        default=0,
        metavar="N",
        help="alternate oracle off / oracle on every N steps instead (train.oracle_every; fault points absent in both)",
    )


def _add_plan(sub) -> None:
    pl = sub.add_parser("plan", help="one epoch's batch plan per bucket, beside the seeds' figures")
    pl.add_argument("--preset", default="seeds", help=f"one of: {', '.join(presets.PRESETS)} (default seeds)")
    pl.add_argument(
        "--lengths",
        default=None,
        metavar="FILE",
        help="a .npy of lengths or a tokenized dataset (default: data.path, else the shipped index)",
    )
    pl.add_argument("--seed", type=int, default=None, help="shuffle seed (default data.shuffle_seed)")
    pl.add_argument("--epoch", type=int, default=0, help="epoch to plan (default 0)")
    _add_overrides(pl)
    pl.set_defaults(steps=None)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    cfg = presets.get(args.preset)
    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.insert(0, f"train.steps={args.steps}")
    if getattr(args, "out", None):
        overrides.insert(0, f"train.out_dir={args.out}")
    cfg = apply_overrides(cfg, overrides)
    # `--set fixes=a,b` arrives as a string tuple; validate names here so a typo is exit 2
    # (`recommended` is resolved by the trainer, once the device plan is known).

    parse_names(cfg.fixes)
    return cfg


def cmd_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    with started_early(cfg):
        # imports torch: `--help` and a bad argument answer without it
        from dflash.train import train

        outcome = train(cfg, handle_signals=True)
    return report_outcome(outcome)


@contextlib.contextmanager
def started_early(cfg: RunConfig) -> Iterator[None]:
    """What comes before torch's import: our bytecode cache where torch has none (dflash.bytecode),
    then each CUDA device's context, made beside the import (dflash.cuda_context)."""
    started = bytecode.start()
    if started.note():
        print(started.note(), file=sys.stderr, flush=True)
    devices = cfg.devices
    contexts = cuda_context.start((*devices.target_devices, *devices.drafter_devices), remap=devices.remap)
    try:
        yield
    finally:
        contexts.join()
        started.close()


def report_outcome(outcome) -> int:
    res = outcome.pipeline
    if outcome.wrong_result is not None:
        print(f"WRONG_RESULT: {outcome.wrong_result}", flush=True)
        print(f"WRONG_RESULT: {outcome.wrong_result}", file=sys.stderr, flush=True)
    elif outcome.exit_code in (130, 143) and not (res is not None and res.failures):
        if res is not None and res.alive:
            print(res.report(), file=sys.stderr, flush=True)
        if outcome.checkpoint:
            print(f"stopped by signal: checkpoint written to {outcome.checkpoint}", file=sys.stderr)
        else:
            print(f"stopped by signal: no checkpoint written ({outcome.detail or 'see above'})", file=sys.stderr)
    elif res is not None and not res.ok:
        print(res.report(), file=sys.stderr, flush=True)
    if outcome.stall is not None:
        # The headline went out when the stall was declared; repeat it as the last word.
        print(outcome.stall.headline, file=sys.stderr, flush=True)
    return outcome.exit_code


def cmd_bench(args: argparse.Namespace) -> int:
    if args.rounds is not None and args.rounds < 1:
        raise CommandLineError(f"--rounds must be >= 1, got {args.rounds}")
    if args.oracle_every < 0:
        raise CommandLineError(f"--oracle-every must be >= 0, got {args.oracle_every}")
    cfg = config_from_args(args)
    with started_early(cfg):
        # imports torch: `--help` and a bad argument answer without it
        from dflash.bench import ROUNDS, bench

        return bench(cfg, rounds=ROUNDS if args.rounds is None else args.rounds, oracle_every=args.oracle_every)


def cmd_export(args: argparse.Namespace) -> int:
    # these import torch: `--help` and a bad argument answer without it
    from dflash.checkpoint import load
    from dflash.export import export_hf
    from dflash.models import build_export_drafter

    if os.path.exists(args.out):
        raise UserInputError(f"export folder {args.out!r} already exists")
    ck = load(args.checkpoint)
    cfg = from_dict(ck.config)
    drafter = build_export_drafter(cfg, ck.drafter)
    export_hf(drafter, cfg, args.out)
    print(f"exported step {ck.step} to {args.out}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.epoch < 0 or (args.seed is not None and args.seed < 0):
        raise CommandLineError("--seed and --epoch must be >= 0")
    cfg = config_from_args(args)
    seed = cfg.data.shuffle_seed if args.seed is None else args.seed
    print(plan_text(cfg, lengths_path=args.lengths, seed=seed, epoch=args.epoch), flush=True)
    return 0


COMMANDS = {"train": cmd_train, "bench": cmd_bench, "plan": cmd_plan, "export": cmd_export}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A native crash (several of the races end in SIGSEGV/SIGABRT) then prints every thread's
    # Python stack instead of a bare "Segmentation fault".
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    if argv[:1] == ["prepare"]:
        return prepare_main(argv[1:])
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserInputError as e:
        print(
            f"error: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
            file=sys.stderr,
            flush=True,
        )
        return 2


def exit_process(code: int) -> None:
    """Exit with `code`; if a stage thread survived the shutdown deadline, do not wait for it."""
    sys.stdout.flush()
    sys.stderr.flush()
    alive = [t for t in threading.enumerate() if t.name.startswith("dflash-") and t.is_alive()]
    if alive:
        os._exit(code)
    sys.exit(code)
