"""The GPU gate's record: the GPU race suite, the generated GPU programs (tests/shapes) and the
corpus's GPU programs, raw against the fix the diagnosis offers, in one JSON file per run (`results/gpu-gate/<date>.json`).

    python3 -m tools.gpu_gate programs [--shards K]       # the GPU entries with a fix, K lines of names
    python3 -m tools.gpu_gate record --junit J.xml --corpus A.json [B.json ...] --commit SHA --out FILE

`tools/h200_run.sh ... gate` runs both on a GPU host from a plain checkout. Green means no race
test failed or errored, and every program whose fix is expected to hold had it hold (fixed 0/n,
n > 0) with its raw arm judged as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tools import corpus


class GateError(ValueError):
    """Bad input to the gate's record: one line, exit 2."""


def programs(shards: int, only: str = "") -> list[list[str]]:
    """The GPU entries that name a fix (those of `only`, comma-separated, if given), dealt
    round-robin into `shards` groups."""
    chosen = set(only.split(",")) if only else None
    names = [p.name for p in corpus.load() if p.device == "cuda" and p.fix and (chosen is None or p.name in chosen)]
    if chosen is not None and chosen - set(names):
        raise GateError(f"--only: no GPU entry with a fix named {sorted(chosen - set(names))}")
    return [names[i::shards] for i in range(shards) if names[i::shards]]


def junit_counts(path: Path) -> dict:
    """passed, failed (failures + errors), skipped and the failing tests' ids from pytest's JUnit XML."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise GateError(f"--junit {path}: {e}") from None
    failed, skipped, passed = [], 0, 0
    shapes = {"right": 0, "wrong": 0, "unconfirmed": 0}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        verdict = "wrong" if tags & {"failure", "error"} else "unconfirmed" if "skipped" in tags else "right"
        if case.get("name", "").startswith(GPU_SHAPES):
            shapes[verdict] += 1
        if verdict == "wrong":
            failed.append(name)
        elif verdict == "unconfirmed":
            skipped += 1
        else:
            passed += 1
    counts = {"passed": passed, "failed": len(failed), "skipped": skipped, "failed_tests": failed}
    return {**counts, "gpu_shapes": shapes} if sum(shapes.values()) else counts


GPU_SHAPES = "test_stress_reads_the_generated_gpu_program"
"""The generated GPU programs (tests/shapes): right, wrong, or unconfirmed (the fault did not fire
in every run, so the program was not judged)."""


def corpus_rows(paths: list[Path]) -> list[dict]:
    """The side-by-side rows of `tools.corpus --fixes --out STEM` JSON files."""
    rows = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise GateError(f"--corpus {path}: {e}") from None
        for f in data.get("fixes") or ():
            rows.append(
                {
                    "name": f["name"],
                    "raw": f["raw"],
                    "fix": f["fix"],
                    "fixed": f["fixed"],
                    "fix_holds": f["fix_holds"],
                    "skipped": f["skipped"],
                    "as_expected": f["as_expected"],
                    "verdict": f["verdict"],
                    # sets measured beside them (`--also`), not judged: the gate's green ignores them
                    "also": [{k: a[k] for k in ("fix", "failed", "runs")} for a in f.get("also") or ()],
                }
            )
    return rows


def green(record: dict) -> bool:
    """No race test failed, and every program ran and came out as its entry expects."""
    ran = [p for p in record["programs"] if not p["skipped"]]
    return record["failed"] == 0 and record["passed"] > 0 and bool(ran) and all(p["as_expected"] for p in ran)


def build(junit: Path, corpora: list[Path], commit: str) -> dict:
    record = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "host": f"{platform.node()} ({os.cpu_count()} cores)",
        "torch": corpus.torch_of(sys.executable),
        **junit_counts(junit),
        "programs": corpus_rows(corpora),
    }
    record["green"] = green(record)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_gate", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    sp = sub.add_parser("programs", help="the GPU entries with a fix, one shard per line")
    sp.add_argument("--shards", type=int, default=1)
    sp.add_argument("--only", default="", help="comma-separated entry names (default: all)")
    rp = sub.add_parser("record", help="write the gate's record")
    rp.add_argument("--junit", required=True, type=Path)
    rp.add_argument("--corpus", nargs="+", default=[], type=Path)
    rp.add_argument("--commit", required=True)
    rp.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    try:
        if a.verb == "programs":
            if a.shards < 1:
                raise GateError("--shards must be >= 1")
            print("\n".join(",".join(names) for names in programs(a.shards, a.only)))
            return 0
        record = build(a.junit, a.corpus, a.commit)
    except (GateError, corpus.CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(a.out)  # never a half-written record
    print(
        f"gate {'green' if record['green'] else 'RED'}: {record['passed']} passed, {record['failed']} failed; "
        f"{sum(p['as_expected'] for p in record['programs'])}/{len(record['programs'])} programs as expected"
        + "".join(f"; GPU shapes {k} {v}" for k, v in record.get("gpu_shapes", {}).items())
    )
    return 0 if record["green"] else 1


if __name__ == "__main__":
    sys.exit(main())
