"""Generated programs with ground truth by construction, run through `harness stress`, expected vs found.

    python -m tools.shapes --n 300                 # 300 programs drawn (seed 0), results/shapes/<date>.md
    python -m tools.shapes --n 10 --seed 3 --runs 3 --work /tmp/shapes-work --no-shrink
    python -m tools.shapes --only child.logging.F2.exit-0 --out /tmp/shapes   # given shapes, no draw

Each program is drawn part by part (tests/shapes: start, report, fault, ending), written, and run
once directly (`python prog.py`, no harness): a program whose fault did not fire there (or, for
`none`, one that saw a fault) is redrawn and counted as such. Then `harness stress` runs it and
its verdict is compared with what the parts say it should be (tests/shapes/expected.py), on runs
whose own truth confirms the fault; a program whose stress runs did not all fire is `unconfirmed`,
not judged. Each wrong verdict is shrunk part by part toward the simplest values, to the smallest
program still wrong. The report: a table of right/total for every value of every part, the total,
and each wrong verdict with its smallest program, expected vs found and its runs' folder.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.shapes import truth
from tests.shapes.expected import expected
from tests.shapes.sample import KNOWN_WRONG, matches
from tests.shapes.shape import PARTS, Shape, parse
from tests.shapes.strategies import draw, shrink
from tests.shapes.verdicts import Judged, judge
from tests.shapes.writer import write

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "shapes"
SHRINK_BUDGET = 8
"""Candidates tried per wrong verdict (each a direct run and a stress)."""
JOB_DEADLINE_S = 900.0
"""A program judged (its direct run and its stress runs) ends well within this."""


class ShapesError(ValueError):
    """Bad input: one `error:` line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, as the project's other commands say it
        raise ShapesError(message)


@dataclass
class Tally:
    judged: list[Judged] = field(default_factory=list)
    not_fired: list[Shape] = field(default_factory=list)
    """Redrawn: the direct run did not confirm the fault."""
    shrunk: dict[Shape, Judged] = field(default_factory=dict)
    """Each wrong verdict's smallest still-wrong program."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m tools.shapes", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=300, help="programs to judge (default 300)")
    p.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    p.add_argument("--runs", type=int, help="stress runs per program (default: 3 for deterministic, else 2)")
    p.add_argument("--work", help="folder for programs and their runs (default: a new temp folder)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="folder of the dated report (default results/shapes)")
    p.add_argument("--no-shrink", action="store_true", help="report wrong verdicts unshrunk")
    p.add_argument("--jobs", type=int, default=1, help="programs judged at once, each stress -p 2 (default 1)")
    p.add_argument("--only", help="judge these shapes instead of a draw: start.report.fault.ending[,...]")
    a = p.parse_args(argv)
    try:
        a.shapes = [parse(x) for x in a.only.split(",")] if a.only else None
    except ValueError as e:
        raise ShapesError(f"--only: {e}") from None
    if a.shapes is not None:
        a.n = len(a.shapes)
    if a.n < 1:
        raise ShapesError(f"--n must be >= 1, got {a.n}")
    if a.jobs < 1:
        raise ShapesError(f"--jobs must be >= 1, got {a.jobs}")
    if a.runs is not None and a.runs < 1:
        raise ShapesError(f"--runs must be >= 1, got {a.runs}")
    return a


def fires(shape: Shape, work: Path) -> bool:
    """The one direct run confirms the fault (for `none`: that nothing fired)."""
    program = write(shape, work / "programs")
    got = truth.direct_run(program, shape, work / "direct" / shape.name)
    return truth.confirmed([got], shape.fault)


def judge_one(shape: Shape, work: Path, runs: int | None) -> Judged | None:
    """Direct run, then stress; None where the direct run did not confirm the fault."""
    if not fires(shape, work):
        return None
    return judge(shape, work / "runs" / shape.name, runs=runs, program_dir=work / "programs")


def run_all(a: argparse.Namespace, work: Path) -> Tally:
    """Judge `a.n` confirmed-or-not programs, `a.jobs` at a time; a shape whose direct run did not
    fire is counted and another one drawn in its place."""
    tally, lock = Tally(), threading.Lock()
    shapes = iter(dict.fromkeys(a.shapes if a.shapes is not None else draw(40 * a.n, a.seed)))
    inflight, errors = [0], []

    def take() -> Shape | None:
        with lock:
            if len(tally.judged) + inflight[0] >= a.n:
                return None
            shape = next(shapes, None)
            inflight[0] += shape is not None
            return shape

    def worker() -> None:
        try:
            while (shape := take()) is not None:
                judged = judge_one(shape, work, a.runs)
                with lock:
                    inflight[0] -= 1
                    (tally.judged.append(judged) if judged is not None else tally.not_fired.append(shape))
                if judged is not None:
                    print(f"{shape.name}: {_verdict_word(judged)}", file=sys.stderr, flush=True)
        except BaseException as e:  # surfaces below, after the join
            errors.append(e)

    _run_workers(worker, a.jobs, deadline_s=JOB_DEADLINE_S * (a.n // a.jobs + 1))
    if errors:
        raise ExceptionGroup("a shapes worker failed", errors)
    if not a.no_shrink:
        _shrink_wrong(tally, work, a.runs)
    return tally


def _shrink_wrong(tally: Tally, work: Path, runs: int | None) -> None:
    for j in tally.judged:
        if j.confirmed and j.diffs:
            tally.shrunk[j.shape] = smallest(j, work, runs)


def _run_workers(worker, jobs: int, *, deadline_s: float) -> None:
    threads = [threading.Thread(target=worker, name=f"shapes-judge-{k}") for k in range(jobs)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(timeout=max(0.0, end - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        raise RuntimeError(f"shapes workers still running after {deadline_s:.0f} s: {stuck}")


def smallest(j: Judged, work: Path, runs: int | None) -> Judged:
    """The wrong verdict's smallest program still wrong (part by part toward the simplest)."""
    found: dict[Shape, Judged] = {j.shape: j}

    def still_wrong(candidate: Shape) -> bool:
        judged = judge_one(candidate, work, runs)
        if judged is not None:
            found[candidate] = judged
        return judged is not None and judged.confirmed and bool(judged.diffs)

    return found[shrink(j.shape, still_wrong, SHRINK_BUDGET)]


def _verdict_word(j: Judged) -> str:
    if not j.confirmed:
        return f"unconfirmed (runs: {', '.join(j.found.classes)})"
    return "right" if not j.diffs else "wrong: " + "; ".join(j.diffs)


def part_table(judged: list[Judged]) -> list[str]:
    """right/total for every value of every part, over the confirmed programs."""
    rows = ["| part | value | right/total |", "|---|---|---|"]
    confirmed = [j for j in judged if j.confirmed]
    for part, values in PARTS.items():
        for value in values:
            mine = [j for j in confirmed if getattr(j.shape, part) == value]
            rows.append(f"| {part} | {value} | {sum(j.right for j in mine)}/{len(mine)} |")
    return rows


def wrong_lines(tally: Tally) -> list[str]:
    lines = []
    for j in tally.judged:
        if not (j.confirmed and j.diffs):
            continue
        small = tally.shrunk.get(j.shape, j)
        want = expected(small.shape)
        known = matches(small.shape, KNOWN_WRONG)
        lines += [
            f"- `{j.shape.name}` -> smallest `{small.shape.name}`{f' (known: {known})' if known else ''}",
            f"  - expected: failing={want.failing}, races={sorted(want.races) if want.races is not None else None}, deterministic={want.deterministic}, outcomes={sorted(want.outcomes)} ({want.why})",
            f"  - found: {'; '.join(small.diffs)}; runs {small.found.failures}/{small.found.runs}, outcomes {sorted(small.found.outcomes)}; folder `{small.found.folder}`",
        ]
    return lines or ["none"]


def report(tally: Tally, argv: list[str] | None, work: Path) -> str:
    confirmed = [j for j in tally.judged if j.confirmed]
    cmd = "python -m tools.shapes " + " ".join(argv if argv is not None else sys.argv[1:])
    return "\n".join(
        [
            f"# Generated program shapes, {time.strftime('%Y-%m-%d')}",
            "",
            f"- command: `{cmd.strip()}`",
            f"- torch {_torch_version()}, Python {platform.python_version()}, {platform.node()} ({os.cpu_count()} cores)",
            f"- programs and runs: `{work}`",
            f"- judged {len(tally.judged)}; confirmed {len(confirmed)}; unconfirmed in stress {len(tally.judged) - len(confirmed)}; "
            f"redrawn after a direct run that did not confirm the fault: {len(tally.not_fired)}",
            f"- overall right: {sum(j.right for j in confirmed)}/{len(confirmed)}",
            "",
            *part_table(tally.judged),
            "",
            "## Wrong verdicts, each shrunk to its smallest program",
            "",
            *wrong_lines(tally),
            "",
        ]
    )


def _torch_version() -> str:
    import torch  # deferred: only the report needs it, after every run

    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except ShapesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="shapes-"))
    work.mkdir(parents=True, exist_ok=True)
    tally = run_all(a, work)
    text = report(tally, argv, work)
    out = Path(a.out) / f"{time.strftime('%Y-%m-%d')}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
