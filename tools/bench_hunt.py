"""A hunt against plain pytest-run-parallel on the same suite, timed in one run:

    python -m tools.bench_hunt [--runs 3] [--threads 4] [SUITE]

prints the wall time of `python -m harness hunt --runs N --threads T -- SUITE` (isolated runs,
two at once, junit reports, diagnosis, the rerun with one thread) and of N plain
`python -m pytest -p run-parallel --parallel-threads T SUITE` one after the other, and their
ratio. SUITE defaults to the project's own hunt suite (tests/hunt_suite).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = "tests/hunt_suite"


def timed(argv: list[str]) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.monotonic() - start, proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("suite", nargs="?", default=SUITE)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-hunt-") as out:
        hunt = [sys.executable, "-m", "harness", "hunt", f"--runs={a.runs}", f"--threads={a.threads}"]
        hunt_s, hunt_rc = timed([*hunt, "-o", out, "--", a.suite])
    plain = [sys.executable, "-m", "pytest", "-p", "run-parallel", f"--parallel-threads={a.threads}", "-q", a.suite]
    plain_s, codes = 0.0, []
    for _ in range(a.runs):
        took, rc = timed(plain)
        plain_s += took
        codes.append(rc)
    print(f"hunt, {a.runs} runs x {a.threads} threads of {a.suite}: {hunt_s:.1f} s (exit {hunt_rc})")
    print(f"plain pytest-run-parallel, {a.runs} runs one after another: {plain_s:.1f} s (exits {codes})")
    print(f"ratio hunt / plain: {hunt_s / plain_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
