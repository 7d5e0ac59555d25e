"""End to end: `python -m dflash train` with the embedded default preset learns, and `bench` runs.

Runs from the repository root so the synthetic corpus cache (.cache/dflash) is shared with
ordinary runs: the first run of a fresh checkout pays for the target regenerating it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from small_run import REPO

pytestmark = pytest.mark.slow


def run_dflash(argv: list[str], timeout_s: float = 900) -> subprocess.CompletedProcess:
    return run_python(["-m", "dflash", *argv], timeout_s)


def run_python(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """This Python on `args`, from the repository root, with no fault plan inherited."""
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("HARNESS_FAULTS", None)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)


def json_lines(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def test_embedded_default_learns_and_exports(tmp_path):
    out_dir = tmp_path / "run"
    proc = run_dflash(["train", "--out", str(out_dir), "--set", "train.log_interval_s=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json_lines(proc.stdout)
    final = records[-1]
    assert final["event"] == "final"
    assert [r["event"] for r in records[:-1]] == ["metrics"] * (len(records) - 1)
    assert final["steps"] == 160
    assert final["loss_last"] < 0.85 * final["loss_first"], final
    assert final["tau"] > 1.0, final
    assert final["tokens_per_s"] > 0
    assert set(final["busy"]) == {"prefetch", "target", "drafter"}
    assert len(final["position_accuracy"]) == 3  # block_size 4 -> positions 1..3
    assert final["device_plan"] == {"target": ["cpu"], "drafter": ["cpu", "cpu"]}
    assert final["gpu_mem_peak_gib"] is None  # no CUDA device in the plan
    assert sorted(os.listdir(out_dir / "export")) == ["config.json", "model.safetensors", "modeling_dflash.py"]
    assert os.path.isfile(out_dir / "checkpoints" / "LATEST")
    assert "samples loaded:" in proc.stderr  # bucket summary printed at start
    # Where the wall time went: every phase in order, the moments, and the last line says so.
    phases = final["phases"]
    order = [
        k
        for k in phases
        if isinstance(phases[k], float) and k not in ("total", "outside_training_frac") and not k.endswith("_at")
    ]
    assert order[:5] == ["imports", "setup", "target_load", "corpus", "pipeline_build"], phases
    # Every second before the gate opens is in a named phase.
    assert sum(phases[k] for k in order[: order.index("warmup") + 1]) == pytest.approx(phases["gate_open_at"], abs=0.5)
    assert {"warmup", "first_step", "training", "checkpoint", "export", "evaluation"} <= set(order), phases
    assert 0 < phases["training"] < phases["total"] and 0 < phases["outside_training_frac"] < 1
    assert phases["gate_open_at"] < phases["first_step_at"] < phases["total"]
    assert set(phases["warmup_by_thread"]) >= {"dflash-train-0 warmup", "dflash-train-1 first step"}
    assert sum(v for k, v in phases.items() if k in order) <= phases["total"] + 0.5
    assert proc.stderr.rstrip().splitlines()[-1].startswith("timeline: imports ")


def test_bench_reports_throughput_and_fault_point_cost():
    proc = run_dflash(["bench", "--steps", "8"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [r for r in json_lines(proc.stdout) if r["event"] == "bench"]
    assert record["tokens_per_s"] > 0 and record["tokens_per_s_faults_idle"] > 0
    assert 0.2 < record["faults_idle_over_absent"] < 5
    assert 0 < record["fault_point_off_ns"] < 10_000
    assert "tokens/s" in proc.stderr


def test_bench_with_one_round_measures_the_absent_condition_only():
    # tools/h200_run.sh's `bench:PRESET:FIXES` phase: one compile and run, no warm-up round.
    proc = run_dflash(["bench", "--steps", "4", "--rounds", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [r for r in json_lines(proc.stdout) if r["event"] == "bench"]
    assert record["tokens_per_s"] > 0
    assert record["tokens_per_s_faults_idle"] is None and record["faults_idle_over_absent"] is None
    assert record["gpu_busy"] is None and record["gpu_busy_steady"] is None  # a CPU run samples nothing
    assert "warm-up round" not in proc.stderr and "round 1:" not in proc.stderr
    bad = run_dflash(["bench", "--rounds", "0"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == "error: --rounds must be >= 1, got 0"


def test_bench_with_the_oracle_alternates_it_off_and_on():
    proc = run_dflash(["bench", "--steps", "4", "--rounds", "2", "--oracle-every", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [r for r in json_lines(proc.stdout) if r["event"] == "bench"]
    assert record["tokens_per_s"] > 0 and record["tokens_per_s_oracle"] > 0
    assert record["oracle_every"] == 1 and record["oracle"]["checked"] == 4 * 2
    assert len(record["oracle_over_off_paired"]) == 1 and 0 < record["oracle_share_of_drafter"] < 1
    assert "round 0: oracle off" in proc.stderr and "round 1: oracle every 1" in proc.stderr


def test_an_eager_run_with_the_native_target_imports_nothing_it_does_not_use(tmp_path):
    # Each is seconds of a GPU host's start: torch._dynamo (torch.optim's first call, dflash.adamw),
    # transformers (the native target), pandas (pyarrow's to_numpy, dflash.data).
    slow = ("torch._dynamo", "transformers", "pandas")
    code = (
        "import sys; from dflash.cli import main; "
        f"rc = main(['train', '--preset', 'tiny-cpu', '--steps', '3', '--out', {str(tmp_path)!r}, "
        "'--set', 'target.impl=native']); "
        f"print('imported:', [m for m in {slow!r} if m in sys.modules]); sys.exit(rc)"
    )
    proc = run_python(["-c", code], 600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "imported: []" in proc.stdout, proc.stdout[-2000:]
