"""Expected vs found for every program of the foreign corpus (tests/foreign/corpus.toml).

    python -m tools.corpus                      # every CPU program: stress + diagnose, one table
    python -m tools.corpus --fast               # the default test run's subset
    python -m tools.corpus --device cuda        # the GPU subset (on a CUDA host)
    python -m tools.corpus --only NAME[,NAME] --python ENV/bin/python --out results/corpus/x.json

Each program runs as a user would run it: `python -m harness stress --max-runs N ... -- python
PROGRAM`, then `python -m harness diagnose` on the failing runs. A program is as expected
when stress's outcomes hold the expected one (DETERMINISTIC: stress called it a deterministic
failure; OK: no run failed) and the races diagnose names are the expected ones, no more, no less
(`unknown` for a failure no catalogued race matches, `own-code` for a hang in the program's own
locks or queues, which is not a race); an entry with no races expects no catalogued one; warnings are the races an OK run showed.
A program that needs CUDA on a host without it prints SKIP and is counted apart.

    python -m tools.corpus --fixes [--device cuda] [--out STEM]   # side by side: raw vs the entry's fix
    python -m tools.corpus --fixes --also A,B [--also C]            # more sets in the same stress, measured only
    python -m tools.corpus --fixes --keep DIR    # each program's failing runs kept in DIR/<name>/, with diagnosis.txt

`--fixes` runs each selected entry that names a `fix` (comma-separated registry fixes: the fix the
diagnosis offers) as `harness stress --fix none --fix FIX -- python PROGRAM` (run i of each set on
the same seed) and reads stress's arm table: raw k/n and fixed k/n. As expected when the raw set
fails where the entry expects a failure (and does not where it expects OK), and the fixed set is
0/n where `fix_holds` (the default), failing where `fix_holds = false`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.runtime.fixes import FIXES, Policy

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "foreign" / "corpus.toml"
OUTCOMES = ("OK", "CRASH", "ABORT", "HANG", "TIMEOUT", "WRONG_RESULT", "DETERMINISTIC")
FAILING = ("CRASH", "ABORT", "HANG", "TIMEOUT", "WRONG_RESULT")
OWN_CODE = "own-code"
"""A hang of the program's own code, one that followed a thread's failure, or a slow run: no race of
its own, and said so."""


class CorpusError(ValueError):
    """A malformed corpus entry: one line, exit 2."""


@dataclass(frozen=True, kw_only=True)
class Program:
    name: str
    path: str
    args: tuple[str, ...]
    source: str
    device: str
    expect: str
    races: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    plan: str = ""
    timeout: float = 120.0
    hang: float = 20.0
    runs: int = 3
    fast: bool = False
    notes: str = ""
    fix: tuple[str, ...] = ()
    """Registry fixes the diagnosis offers (`fix = "a,b"`): what `--fixes` runs beside raw."""
    fix_holds: bool = True
    """Whether the fix is expected to hold: no failing run under it."""
    rare: bool = False
    """The race's window is too narrow to show in every `runs` runs: raw runs may all pass, and
    those that fail must fail as `races`."""


@dataclass(kw_only=True)
class Found:
    name: str
    expect: str
    races: list[str]
    warnings: list[str]
    outcomes: dict[str, int] = field(default_factory=dict)
    found_races: list[str] = field(default_factory=list)
    found_warnings: list[str] = field(default_factory=list)
    deterministic: bool = False
    skipped: bool = False
    seconds: float = 0.0
    verdict: str = ""
    """`as expected`, `differs: ...` or `skipped: ...`."""

    @property
    def ok(self) -> bool:
        return self.verdict == "as expected"


@dataclass(kw_only=True)
class FixFound:
    """One side-by-side stress of an entry: raw (`--fix none`) and its fix, from stress's arm table."""

    name: str
    expect: str
    fix: str
    fix_holds: bool
    raw_failed: int = 0
    raw_runs: int = 0
    fixed_failed: int = 0
    fixed_runs: int = 0
    rows: list[str] = field(default_factory=list)
    """The arm table's two rows as stress printed them (its further columns: Wilson, time, races)."""
    also: list[dict] = field(default_factory=list)
    """Each `--also` set's arm in the same stress: {"fix", "failed", "runs", "row"}; measured, not judged."""
    skipped: bool = False
    seconds: float = 0.0
    verdict: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "as expected"


def parse_fixes(text: str, where: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in names:
        if n not in FIXES:
            raise CorpusError(f"{where}: fix {n!r} is not a registry fix (harness/runtime/fixes/registry.py)")
        if isinstance(FIXES[n], Policy):
            raise CorpusError(f"{where}: fix {n!r} is a policy: it acts only in a program that reads it")
    if text.strip() and not names:
        raise CorpusError(f"{where}: fix names no fix")
    return names


def load(path: Path = CORPUS) -> list[Program]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CorpusError(f"{path}: {e}") from None
    programs = []
    for raw in data.get("program", []):
        if not raw.get("path"):
            continue  # a report without a reproducer: part of the record only
        where = f"{path.name}: {raw.get('name', '?')}"
        if raw.get("expect") not in OUTCOMES:
            raise CorpusError(f"{where}: expect must be one of {', '.join(OUTCOMES)}")
        if not (ROOT / raw["path"]).is_file():
            raise CorpusError(f"{where}: no program at {raw['path']}")
        programs.append(
            Program(
                name=raw["name"],
                path=raw["path"],
                args=tuple(raw.get("args", ())),
                source=raw.get("source", ""),
                device=raw.get("device", "cpu"),
                expect=raw["expect"],
                races=tuple(raw.get("races", ())),
                warnings=tuple(raw.get("warnings", ())),
                plan=raw.get("plan", ""),
                timeout=float(raw.get("timeout", 120)),
                hang=float(raw.get("hang", 20)),
                runs=int(raw.get("runs", 3)),
                fast=bool(raw.get("fast", False)),
                notes=raw.get("notes", ""),
                fix=parse_fixes(str(raw.get("fix", "")), where),
                fix_holds=bool(raw.get("fix_holds", True)),
                rare=bool(raw.get("rare", False)),
            )
        )
    names = [p.name for p in programs]
    if len(set(names)) != len(names):
        raise CorpusError(f"{path.name}: duplicate names")
    return programs


_DETERMINISTIC = re.compile(r"[^\n]*\bnot (?:by )?a race:")
"""Stress's first line when it stops on a deterministic failure: `a deterministic failure, not a race:
...`, or `your program fails this way on its own, not by a race: ...` (no thread, a race's message)."""


def said_deterministic(stdout: str) -> bool:
    return _DETERMINISTIC.match(stdout) is not None


def stress_command(
    p: Program, *, python: str, runs: int, parallel: int, out: Path, fix_sets: tuple[str, ...] = ()
) -> list[str]:
    """`python -m harness stress ... -- python PROGRAM ARGS`, as a user runs it; one `--fix` per set."""
    cmd = [sys.executable, "-m", "harness", "stress", "-p", str(parallel), "--max-runs", str(runs)]
    cmd += ["--timeout", str(p.timeout), "--hang", str(p.hang), "--interval", "3600"]
    cmd += ["--python", python, "-o", str(out)]
    cmd += ["--plan", p.plan] if p.plan else []
    for fixes in fix_sets:
        cmd += ["--fix", fixes]
    return [*cmd, "--", "python", str(ROOT / p.path), *p.args]


@contextlib.contextmanager
def runs_folder(p: Program, keep: Path | None):
    """Where a program's stress keeps its failing runs: KEEP/<name> (`--keep`), else a folder
    removed after the verdict."""
    if keep is not None:
        yield keep / p.name
        return
    with tempfile.TemporaryDirectory(prefix=f"corpus-{p.name}-") as tmp:
        yield Path(tmp) / "runs"


def keep_diagnosis(out: Path) -> None:
    """`harness diagnose` of a kept folder, beside its runs (diagnosis.txt): an "unknown" row's
    failures read without the host they ran on."""
    if out.is_dir() and any(out.iterdir()):
        diag = subprocess.run(
            [sys.executable, "-m", "harness", "diagnose", str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        (out / "diagnosis.txt").write_text(diag.stdout + diag.stderr)


def run_one(p: Program, *, python: str, runs: int | None = None, parallel: int = 2, keep: Path | None = None) -> Found:
    found = Found(name=p.name, expect=p.expect, races=list(p.races), warnings=list(p.warnings))
    started = time.monotonic()
    with runs_folder(p, keep) as out:
        cmd = stress_command(p, python=python, runs=runs or p.runs, parallel=parallel, out=out)
        # The programs' relative paths and imports resolve as from the checkout.
        done = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, timeout=(runs or p.runs) * (p.timeout + 90) + 120
        )
        found.seconds = round(time.monotonic() - started, 1)
        text = done.stdout
        found.deterministic = said_deterministic(text)
        m = re.search(r"outcomes: (.*)$", text, re.M)
        found.outcomes = {k: int(v) for k, v in (x.split(":") for x in m.group(1).split())} if m else {}
        found.skipped = (not any(o in found.outcomes for o in FAILING) and "SKIP:" in done.stderr) or (
            not m and done.returncode == 0
        )
        if out.is_dir() and any(out.iterdir()):
            diag = subprocess.run(
                [sys.executable, "-m", "harness", "diagnose", str(out), "--json"],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=300,
            )
            findings = json.loads(diag.stdout)["findings"] if diag.returncode == 0 else []
            for f in findings:
                own = f.get("verdict", "").startswith(
                    ("a hang of the program's own code", "slow, not hung", "a hang that followed a thread's failure")
                )
                race = f.get("race") or (OWN_CODE if own else "unknown")
                target = found.found_warnings if f.get("outcome") == "OK" else found.found_races
                if race not in target:
                    target.append(race)
        if done.returncode == 2:
            found.verdict = f"differs: stress refused it: {done.stderr.strip().splitlines()[-1][:200]}"
            return found
    found.verdict = judge(p, found)
    return found


def judge(p: Program, f: Found) -> str:
    if f.skipped and p.expect != "OK":
        return "skipped: it printed SKIP (needs what this host lacks)"
    failing = {o for o in f.outcomes if o in FAILING}
    problems = []
    if p.expect == "DETERMINISTIC":
        if not f.deterministic:
            problems.append("not called deterministic")
    elif p.expect == "OK":
        if failing:
            problems.append(f"runs failed: {', '.join(sorted(failing))}")
    elif p.expect not in f.outcomes and not p.rare:
        problems.append(f"no {p.expect} run (outcomes {f.outcomes or 'none'})")
    named = sorted(r for r in f.found_races if r != OWN_CODE)
    if not p.races:
        fits = set(named) <= {"unknown"}
    else:
        fits = set(named) <= set(p.races) if p.rare else named == sorted(p.races)
    if p.expect not in ("OK", "DETERMINISTIC") and not fits:
        problems.append(f"races {f.found_races or ['none']} (expected {list(p.races) or ['no catalogued race']})")
    missing = [w for w in p.warnings if w not in f.found_warnings]
    if missing:
        problems.append(f"warnings {f.found_warnings or ['none']} (expected {list(p.warnings)})")
    return "as expected" if not problems else "differs: " + "; ".join(problems)


_ARM_HEADER = re.compile(r"^\s*fix(?:es|\s+sets?)?\s+failed\b", re.I)
_ARM_ROW = re.compile(r"^\s*(?P<arm>\S(?:.*?\S)?)\s+(?P<k>\d+)/(?P<n>\d+)(?=\s|$)")


@dataclass(frozen=True)
class Arm:
    failed: int
    runs: int
    row: str


def arm_rows(text: str) -> dict[str, Arm]:
    """Stress's side-by-side table, by set name (`none`, `a,b`, `as is`): each row's `failed` k/n.

    The rows follow a header line `fixes  failed ...` and end at the first line that is not one;
    columns after `failed` (Wilson, run time, races...) are kept in the row's text, not read."""
    rows: dict[str, Arm] = {}
    inside = False
    for line in text.splitlines():
        if _ARM_HEADER.match(line):
            inside, rows = True, {}
            continue
        m = _ARM_ROW.match(line) if inside else None
        if m is None:
            inside = inside and not rows  # a line before the first row (none so far) keeps it open
            continue
        rows[m["arm"]] = Arm(failed=int(m["k"]), runs=int(m["n"]), row=line.strip())
    return rows


_ROW_RACES = re.compile(r"\s\d+\.\d+x\s+(?P<races>\S.*)$")


def row_races(row: str) -> list[str]:
    """An arm row's races column (`F2 1, F10 3`; `-` for none) as race names."""
    m = _ROW_RACES.search(row)
    if m is None or m["races"] == "-":
        return []
    return [part.split()[0] for part in m["races"].split(", ")]


def arm_of(rows: dict[str, Arm], fix: tuple[str, ...]) -> Arm | None:
    """The row of a fix set, whatever order stress printed its names in."""
    return next((a for name, a in rows.items() if set(name.replace(" ", "").split(",")) == set(fix)), None)


def pick_arms(rows: dict[str, Arm], fix: tuple[str, ...]) -> tuple[Arm, Arm] | None:
    """(raw, fixed): the `none` row and the row naming the fix's set (stress may reorder the names);
    two rows that name neither are taken in the order given (`--fix none` first)."""
    raw = rows.get("none")
    fixed = arm_of(rows, fix)
    if (raw is None or fixed is None) and len(rows) == 2:
        raw, fixed = rows.values()
    return (raw, fixed) if raw is not None and fixed is not None else None


def judge_fix(p: Program, f: FixFound) -> str:
    if f.skipped:
        return "skipped: needs CUDA, which this host lacks"
    if not f.raw_runs or not f.fixed_runs:
        return f"differs: no completed runs (raw {f.raw_failed}/{f.raw_runs}, fixed {f.fixed_failed}/{f.fixed_runs})"
    problems = []
    if p.expect == "OK" and f.raw_failed:
        problems.append(f"raw failed {f.raw_failed}/{f.raw_runs} (expected OK)")
    elif p.expect != "OK" and not f.raw_failed and not p.rare:
        problems.append(f"raw did not fail (0/{f.raw_runs}; expected {p.expect})")
    if p.rare and f.raw_failed:
        named = row_races(f.rows[0]) if f.rows else []
        if not named or not set(named) <= set(p.races):
            problems.append(f"raw failed as {', '.join(named) or 'no catalogued race'} (expected {', '.join(p.races)})")
    if p.fix_holds and f.fixed_failed:
        problems.append(f"{f.fix} did not hold ({f.fixed_failed}/{f.fixed_runs} failed)")
    elif not p.fix_holds and not f.fixed_failed:
        problems.append(f"{f.fix} held (0/{f.fixed_runs}; the entry expects it not to)")
    return "as expected" if not problems else "differs: " + "; ".join(problems)


def read_fix_run(
    p: Program, f: FixFound, done: subprocess.CompletedProcess, also: tuple[tuple[str, ...], ...] = ()
) -> None:
    """Fill f from one side-by-side stress: its arm table, or why there is none."""
    if done.returncode == 2:
        lines = done.stderr.strip().splitlines() or ["(no message)"]
        f.verdict = f"differs: stress refused it: {lines[-1][:200]}"
        return
    rows = arm_rows(done.stdout)
    for fix in also:
        arm = arm_of(rows, fix)
        got = {"failed": arm.failed, "runs": arm.runs, "row": arm.row} if arm else {"failed": 0, "runs": 0, "row": ""}
        f.also.append({"fix": ",".join(fix), **got})
    arms = pick_arms(rows, p.fix)
    if arms is None:
        f.verdict = f"differs: no side-by-side table in stress's output (exit {done.returncode})"
        return
    raw, fixed = arms
    f.raw_failed, f.raw_runs, f.fixed_failed, f.fixed_runs = raw.failed, raw.runs, fixed.failed, fixed.runs
    f.rows = [raw.row, fixed.row]
    f.verdict = judge_fix(p, f)


def run_fix(
    p: Program,
    *,
    python: str,
    runs: int | None = None,
    parallel: int = 2,
    cuda: bool = True,
    also: tuple[tuple[str, ...], ...] = (),
    keep: Path | None = None,
) -> FixFound:
    """Raw, the entry's fix and any `--also` sets side by side under one stress (same seeds)."""
    fix = ",".join(p.fix)
    f = FixFound(name=p.name, expect=p.expect, fix=fix, fix_holds=p.fix_holds)
    if p.device == "cuda" and not cuda:
        f.skipped = True
        f.verdict = judge_fix(p, f)
        return f
    n = runs or p.runs
    started = time.monotonic()
    with runs_folder(p, keep) as out:
        cmd = stress_command(
            p, python=python, runs=n, parallel=parallel, out=out,
            fix_sets=("none", fix, *(",".join(x) for x in also)),
        )  # fmt: skip
        limit = (2 + len(also)) * n * (p.timeout + 90) + 120
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=limit)
        except subprocess.TimeoutExpired:
            done = None
        if keep is not None:
            keep_diagnosis(out)
    f.seconds = round(time.monotonic() - started, 1)
    if done is None:
        # one stuck stress must not cost the other entries' verdicts (a GPU gate runs them in one go)
        f.verdict = f"differs: stress did not finish within {limit:g} s"
    else:
        read_fix_run(p, f, done, also)
    return f


def has_cuda(python: str) -> bool:
    """Whether the programs' interpreter sees a GPU (a GPU entry elsewhere prints SKIP: not judged)."""
    probe = "import torch; print(torch.cuda.is_available())"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() == "True"


def fix_table(found: list[FixFound], *, torch: str, host: str) -> str:
    judged = [f for f in found if not f.skipped]
    good = sum(f.ok for f in judged)
    lines = [
        f"fixes side by side on torch {torch}, {host}: {good}/{len(judged)} as expected"
        + (f"; {len(found) - len(judged)} skipped" if len(found) != len(judged) else ""),
        "",
        "| program | expected | fix (what its entry says) | raw failed | fixed failed | s | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in found:
        raw = f"{f.raw_failed}/{f.raw_runs}" if f.raw_runs else "-"
        fixed = f"{f.fixed_failed}/{f.fixed_runs}" if f.fixed_runs else "-"
        holds = "should hold" if f.fix_holds else "should not hold"
        if f.fix_holds and f.raw_runs and not f.raw_failed:
            holds += "; untested, raw never failed"  # a rare entry's quiet raw arm: 0/n fixed shows nothing
        lines.append(f"| {f.name} | {f.expect} | {f.fix} ({holds}) | {raw} | {fixed} | {f.seconds:g} | {f.verdict} |")
    also = [(f.name, a) for f in found for a in f.also]
    if also:
        lines += ["", "Also measured in the same stresses (same seeds, not judged):", ""]
        lines += ["| program | fix set | failed |", "|---|---|---|"]
        for name, a in also:
            counted = f"{a['failed']}/{a['runs']}" if a["runs"] else "-"
            lines.append(f"| {name} | {a['fix']} | {counted} |")
    return "\n".join(lines)


def table(found: list[Found], *, torch: str, host: str) -> str:
    judged = [f for f in found if not f.verdict.startswith("skipped")]
    good = sum(f.ok for f in judged)
    lines = [
        f"corpus on torch {torch}, {host}: {good}/{len(judged)} as expected"
        + (f" ({100 * good / len(judged):.0f}%)" if judged else "")
        + (f"; {len(found) - len(judged)} skipped" if len(found) != len(judged) else ""),
        "",
        "| program | expected | races (+ at exit 0) | found outcomes | found races (+ at exit 0) | s | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in found:
        exp = ", ".join(f.races) or "none"
        exp += f" + {', '.join(f.warnings)}" if f.warnings else ""
        got = ", ".join(f.found_races) or "none"
        got += f" + {', '.join(f.found_warnings)}" if f.found_warnings else ""
        outs = " ".join(f"{k}:{v}" for k, v in sorted(f.outcomes.items())) + (
            " deterministic" if f.deterministic else ""
        )
        lines.append(f"| {f.name} | {f.expect} | {exp} | {outs or '-'} | {got} | {f.seconds:g} | {f.verdict} |")
    return "\n".join(lines)


def torch_of(python: str) -> str:
    probe = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept Exception: print('?')"
    return subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip() or "?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tools.corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="only the programs marked fast (the default test run's)")
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu", help="which programs (default cpu)")
    ap.add_argument("--only", help="comma-separated program names")
    ap.add_argument("--runs", type=int, help="max runs per program (default: each entry's; per set with --fixes)")
    ap.add_argument("-p", "--parallel", type=int, default=2, help="runs at once per program (2)")
    ap.add_argument("--python", default=sys.executable, help="interpreter the programs run under (its torch)")
    ap.add_argument(
        "--fixes", action="store_true", help="side by side: each chosen entry with a `fix`, raw vs that fix"
    )
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="FIXES",
        help="with --fixes: another fix set (comma-separated) in the same stress, same seeds; measured, not judged",
    )
    ap.add_argument("--out", help="also write the table (.md) and the findings (.json) here, by this stem")
    ap.add_argument(
        "--keep", type=Path, help="keep each program's failing runs in KEEP/<name>/ (with --fixes, its diagnosis.txt)"
    )
    return ap.parse_args(argv)


def choose(programs: list[Program], a: argparse.Namespace) -> list[Program]:
    """The programs the flags select; CorpusError for an --only name that is not there (or, with
    --fixes, names no fix)."""
    only = set(a.only.split(",")) if a.only else None
    if only and only - {p.name for p in programs}:
        raise CorpusError(f"--only: no program {sorted(only - {p.name for p in programs})}")
    if a.fixes and only and only - {p.name for p in programs if p.fix}:
        raise CorpusError(f"--fixes: these entries name no fix: {sorted(only - {p.name for p in programs if p.fix})}")
    return [
        p
        for p in programs
        if (only is None or p.name in only)
        and (not a.fast or p.fast)
        and (a.device == "all" or p.device == a.device)
        and (p.fix or not a.fixes)
    ]


def fix_row(f: FixFound) -> dict:
    return {**asdict(f), "raw": f"{f.raw_failed}/{f.raw_runs}", "fixed": f"{f.fixed_failed}/{f.fixed_runs}"} | {
        "as_expected": f.ok
    }


def write_out(stem: Path, text: str, record: dict, argv: list[str] | None) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    Path(f"{stem}.md").write_text(f"{text}\n\nCommand: python -m tools.corpus {command}\n")
    Path(f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        if a.also and not a.fixes:
            raise CorpusError("--also needs --fixes (it adds a fix set beside the entry's)")
        a.also_sets = tuple(parse_fixes(x, "--also") for x in a.also)
        chosen = choose(load(), a)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch = torch_of(a.python)
    cuda = any(p.device == "cuda" for p in chosen) and has_cuda(a.python)
    found: list = []
    for p in chosen:
        if a.fixes:
            f = run_fix(p, python=a.python, runs=a.runs, parallel=a.parallel, cuda=cuda, also=a.also_sets, keep=a.keep)
        elif p.device == "cuda" and not cuda:
            # stress keeps no passing run, so the program's SKIP line would not reach us
            f = Found(name=p.name, expect=p.expect, races=list(p.races), warnings=list(p.warnings), skipped=True)
            f.verdict = "skipped: needs CUDA, which this host lacks"
        else:
            f = run_one(p, python=a.python, runs=a.runs, parallel=a.parallel, keep=a.keep)
        print(f"{p.name}: {f.verdict} ({f.seconds:g} s)", file=sys.stderr, flush=True)
        found.append(f)
    host = f"{platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}"
    if a.fixes:
        text = fix_table(found, torch=torch, host=host)
        record = {"torch": torch, "host": host, "fixes": [fix_row(f) for f in found]}
    else:
        text = table(found, torch=torch, host=host)
        record = {"torch": torch, "host": host, "programs": [asdict(f) for f in found]}
    print(text)
    if a.out:
        write_out(Path(a.out), text, record, argv)
    judged = [f for f in found if not f.verdict.startswith("skipped")]
    return 0 if all(f.ok for f in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
