"""stress and hunt through `--backend local` and through Ray on a local cluster of two nodes, on
this machine, timed and compared in one run:

    python -m tools.ray_bench.commands [--rounds 2]

The cluster is two Ray nodes of one CPU each on loopback (`ray.cluster_utils.Cluster`, as the
tests start it); the local backend gets the same two runs at once. Each round times a hunt (4 runs
of tests/hunt_suite's steady part: a test failing with and without threads, a clean one) and a
stress (6 runs of a program whose worker thread dies, exit 0), local and on Ray, alternating which
goes first, and prints whether the two folders give the same verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
PROGRAM = (
    "import threading\n"
    "def work():\n"
    "    raise ValueError('bad item 7')\n"
    "t = threading.Thread(target=work, name='loader'); t.start(); t.join()\n"
)


def harness(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True)
    return time.monotonic() - start, proc


def hunt_verdicts(stdout: str) -> list[tuple]:
    return sorted((t["id"], t["verdict"], t["failed"], t["runs"], t["one_thread"]) for t in json.loads(stdout)["tests"])


def stress_counts(stdout: str) -> str:
    return next((line.split(", over")[0] for line in stdout.splitlines() if "runs completed" in line), "?")


def one(kind: str, backend: list[str], out: Path, program: Path) -> dict:
    if kind == "hunt":
        args = [
            "hunt",
            "--json",
            "--runs",
            "4",
            *backend,
            "-o",
            str(out),
            "--",
            "tests/hunt_suite",
            "-k",
            "deterministic or clean",
        ]
        took, proc = harness(*args)
        return {"s": took, "rc": proc.returncode, "verdicts": hunt_verdicts(proc.stdout) if proc.stdout else None}
    args = [
        "stress",
        "-p",
        "2",
        "--max-runs",
        "6",
        "--keep-going",
        *backend,
        "-o",
        str(out),
        "--",
        "python",
        str(program),
    ]
    took, proc = harness(*args)
    return {"s": took, "rc": proc.returncode, "verdicts": stress_counts(proc.stdout)}


def one_round(k: int, address: str, tmp: Path, program: Path) -> None:
    ray = ["--backend", "ray", "--address", address]
    for kind in ("hunt", "stress"):
        order = [("local", []), ("ray", ray)]
        got = {}
        for name, backend in order if k % 2 == 0 else order[::-1]:
            got[name] = one(kind, backend, tmp / f"{kind}-{name}-{k}", program)
        same = got["local"]["verdicts"] == got["ray"]["verdicts"]
        print(
            f"round {k + 1} {kind}: local {got['local']['s']:.1f} s (exit {got['local']['rc']}), "
            f"ray {got['ray']['s']:.1f} s (exit {got['ray']['rc']}), ratio {got['ray']['s'] / got['local']['s']:.2f}; "
            f"same verdicts: {same} ({got['local']['verdicts']})",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    os.environ.update(LOOPBACK)
    from ray.cluster_utils import Cluster  # deferred: Ray is an optional extra

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20})
    nodes.add_node(num_cpus=1, object_store_memory=80 * 2**20)
    print(f"# python -m tools.ray_bench.commands --rounds {a.rounds}; {os.cpu_count()} cores; cluster {nodes.address}")
    try:
        with tempfile.TemporaryDirectory(prefix="ray-commands-") as tmp:
            program = Path(tmp) / "dies.py"
            program.write_text(PROGRAM)
            for k in range(a.rounds):
                one_round(k, nodes.address, Path(tmp), program)
    finally:
        nodes.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
