"""A default hunt against one direct pytest-run-parallel run of the same suite, timed in one run:

    python -m tools.bench_hunt [--direct 3] [--threads 4] [--rounds 1] [SUITE [PYTEST_ARGS...]]

Each round times `python -m harness hunt --threads T -- SUITE` (its defaults: 3 runs, as many at
once as the cores, junit reports, diagnosis, the rerun with one thread, the reruns alone) and
`--direct` plain `python -m pytest -p run-parallel --parallel-threads T SUITE` runs one after
another, then prints the hunt's time over the median direct run: what a user who already runs
pytest-run-parallel pays for the verdicts. Rounds alternate the order (hunt first, then direct
first) so that a warming disk or cache favours neither. SUITE defaults to the project's own hunt
suite (tests/hunt_suite); the environment passes through (a third-party suite's PYTHONPATH, its
backends' variables).
"""

from __future__ import annotations

import argparse
import os
import statistics
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


def hunt_once(threads: int, suite: list[str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-hunt-") as out:
        return timed([sys.executable, "-m", "harness", "hunt", f"--threads={threads}", "-o", out, "--", *suite])


def direct_runs(n: int, threads: int, suite: list[str]) -> list[tuple[float, int]]:
    argv = [sys.executable, "-m", "pytest", "-p", "run-parallel", f"--parallel-threads={threads}", "-q", *suite]
    return [timed(argv) for _ in range(n)]


def one_round(k: int, a: argparse.Namespace, suite: list[str]) -> float:
    if k % 2 == 0:
        hunt_s, hunt_rc = hunt_once(a.threads, suite)
        direct = direct_runs(a.direct, a.threads, suite)
    else:
        direct = direct_runs(a.direct, a.threads, suite)
        hunt_s, hunt_rc = hunt_once(a.threads, suite)
    median = statistics.median(s for s, _ in direct)
    print(f"## round {k + 1} ({'hunt first' if k % 2 == 0 else 'direct first'})")
    print(f"hunt (defaults, --threads {a.threads}): {hunt_s:.1f} s (exit {hunt_rc})")
    times = ", ".join(f"{s:.1f}" for s, _ in direct)
    print(f"direct pytest-run-parallel runs: {times} s (exits {[rc for _, rc in direct]}); median {median:.1f} s")
    print(f"ratio hunt / one direct run: {hunt_s / median:.2f}", flush=True)
    return hunt_s / median


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--direct", type=int, default=3, help="direct runs per round (their median is one run)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("suite", nargs=argparse.REMAINDER, help="SUITE [PYTEST_ARGS...] (default tests/hunt_suite)")
    a = p.parse_args(argv)
    suite = a.suite or [SUITE]
    print(f"# python -m tools.bench_hunt {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start")
    ratios = [one_round(k, a, suite) for k in range(a.rounds)]
    print(f"median ratio over {len(ratios)} round(s): {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
