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
"""

from __future__ import annotations

import argparse
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
            )
        )
    names = [p.name for p in programs]
    if len(set(names)) != len(names):
        raise CorpusError(f"{path.name}: duplicate names")
    return programs


def run_one(p: Program, *, python: str, runs: int | None = None, parallel: int = 2) -> Found:
    found = Found(name=p.name, expect=p.expect, races=list(p.races), warnings=list(p.warnings))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"corpus-{p.name}-") as tmp:
        out = Path(tmp) / "runs"
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "stress",
            "-p",
            str(parallel),
            "--max-runs",
            str(runs or p.runs),
            "--timeout",
            str(p.timeout),
            "--hang",
            str(p.hang),
            "--interval",
            "3600",
            "--python",
            python,
            "-o",
            str(out),
        ]
        cmd += ["--plan", p.plan] if p.plan else []
        cmd += ["--", "python", str(ROOT / p.path), *p.args]
        # The programs' relative paths and imports resolve as from the checkout.
        done = subprocess.run(
            cmd, capture_output=True, text=True, cwd=ROOT, timeout=(runs or p.runs) * (p.timeout + 90) + 120
        )
        found.seconds = round(time.monotonic() - started, 1)
        text = done.stdout
        found.deterministic = text.startswith("a deterministic failure")
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
    elif p.expect not in f.outcomes:
        problems.append(f"no {p.expect} run (outcomes {f.outcomes or 'none'})")
    named = sorted(r for r in f.found_races if r != OWN_CODE)
    fits = set(named) <= {"unknown"} if not p.races else named == sorted(p.races)
    if p.expect not in ("OK", "DETERMINISTIC") and not fits:
        problems.append(f"races {f.found_races or ['none']} (expected {list(p.races) or ['no catalogued race']})")
    missing = [w for w in p.warnings if w not in f.found_warnings]
    if missing:
        problems.append(f"warnings {f.found_warnings or ['none']} (expected {list(p.warnings)})")
    return "as expected" if not problems else "differs: " + "; ".join(problems)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="only the programs marked fast (the default test run's)")
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu", help="which programs (default cpu)")
    ap.add_argument("--only", help="comma-separated program names")
    ap.add_argument("--runs", type=int, help="max runs per program (default: each entry's)")
    ap.add_argument("-p", "--parallel", type=int, default=2, help="runs at once per program (2)")
    ap.add_argument("--python", default=sys.executable, help="interpreter the programs run under (its torch)")
    ap.add_argument("--out", help="also write the table (.md) and the findings (.json) here, by this stem")
    a = ap.parse_args(argv)
    try:
        programs = load()
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    only = set(a.only.split(",")) if a.only else None
    if only and only - {p.name for p in programs}:
        print(f"error: --only: no program {sorted(only - {p.name for p in programs})}", file=sys.stderr)
        return 2
    chosen = [
        p
        for p in programs
        if (only is None or p.name in only) and (not a.fast or p.fast) and (a.device == "all" or p.device == a.device)
    ]
    torch = torch_of(a.python)
    found = []
    for p in chosen:
        f = run_one(p, python=a.python, runs=a.runs, parallel=a.parallel)
        print(f"{p.name}: {f.verdict} ({f.seconds:g} s)", file=sys.stderr, flush=True)
        found.append(f)
    host = f"{platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}"
    text = table(found, torch=torch, host=host)
    print(text)
    if a.out:
        stem = Path(a.out)
        stem.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{stem}.md").write_text(
            text + "\n\nCommand: python -m tools.corpus " + " ".join(argv if argv is not None else sys.argv[1:]) + "\n"
        )
        Path(f"{stem}.json").write_text(
            json.dumps({"torch": torch, "host": host, "programs": [asdict(f) for f in found]}, indent=1) + "\n"
        )
    judged = [f for f in found if not f.verdict.startswith("skipped")]
    return 0 if all(f.ok for f in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
