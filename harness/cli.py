"""Command line of the harness: one table of commands, one `main`.

Each command is a module of `harness.commands` holding `HELP`, `add_arguments(parser)` and
`run(opts) -> int`; `python -m harness COMMAND --help` shows its arguments.

Exit codes: 0 done; 1 matrix with harness errors, stress/replay/run with failures, shrink of a
trial that no longer reproduces, price with a bench that died; 2 bad input (one line
`error: ...`, nothing written); 130 / 143 after SIGINT / SIGTERM (running trials are killed and
not recorded, so rerunning the same command resumes with them).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from types import ModuleType

from harness.args import Parser
from harness.runtime.errors import UserInputError

COMMANDS: dict[str, str] = {
    # running trials
    "matrix": "matrix",
    "stress": "stress",
    "hunt": "hunt",
    "replay": "replay",
    "shrink": "shrink",
    "run": "run",
    "lift": "lift",
    # naming failures
    "diagnose": "diagnose",
    "doctor": "doctor",
    "show": "show",
    "repro": "repro",
    "evidence": "evidence",
    "glossary": "glossary",
    # reading stores
    "report": "report",
    "families": "families",
    "crosstab": "crosstab",
    "price": "price",
    "benches": "benches",
    "warmup": "warmup",
    "exposure-cost": "exposure_cost",
    # keeping stores
    "merge": "merge",
    "pack": "pack",
    "retire": "retire",
    "re-sign": "resign",
    "migrate": "migrate",
}
"""Each command's module under harness.commands: imported only for the command that runs (all of
them for the top-level --help), which saves a third of a second on every start."""


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"harness.commands.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `only` (a command's name) where given; an alias (a
    module's ALIASES) is known to the whole parser only."""
    parser = Parser(prog="python -m harness", description="Race diagnosis harness.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and only != name:
            continue
        module = command_module(name)
        p = sub.add_parser(
            name, help=module.HELP, description=module.__doc__.split("\n\n")[0], aliases=getattr(module, "ALIASES", ())
        )
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (running trials killed and left for resume), exit 143."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        opts = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        return opts.run(opts)
    except KeyboardInterrupt as e:
        print("terminated" if isinstance(e, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except BrokenPipeError:
        # `... | head`: the reader left. Point stdout at /dev/null so the interpreter's final
        # flush does not raise again (Python docs, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except UserInputError as e:
        # Every bad-input error of the harness and the trainer derives from it (harness.runtime.errors).
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
