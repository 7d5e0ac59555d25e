"""harness.analysis.warmup and `python -m harness warmup`: trainer logs read into warm-up, pace and
break-even figures, on synthetic logs and on the committed H200 logs of 2026-12-02."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis import warmup
from harness.analysis.warmup import Pause, RunSummary, break_even
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "results" / "h200-2026-12-02-warmup"
BAR = "train:  50%|#####     | 1/2 [00:01<00:01,  1.28s/step]"


def write_log(
    path: Path, times: list[float], tokens_per_step: int, *, every: int = 1, threads: int = 3, final: bool = True
) -> Path:
    """A trainer log: step s ends at times[s-1] s after the gate, each step `tokens_per_step`
    tokens; a metrics line every `every` steps (and at step 1), progress-bar text in front of
    some lines as the trainer's shared stdout/stderr has."""
    lines = ["samples loaded: 100"]
    steps = len(times)
    half = times[steps // 2 - 1]
    steady = round(tokens_per_step * (steps - steps // 2) / (times[-1] - half), 2) if steps >= 4 else None
    for s, t in enumerate(times, 1):
        if s == 1 or s % every == 0:
            event = {
                "event": "metrics",
                "step": s,
                "loss": 5.0,
                "tokens_per_s": round(s * tokens_per_step / t, 2),
                "tokens_per_s_steady": steady if s == steps else None,
                "elapsed_s": round(t, 3),
            }
            lines.append((BAR if s % 7 == 0 else "") + json.dumps(event))
    if final:
        lines.append(
            json.dumps(
                {
                    "event": "final",
                    "tokens_per_s": round(steps * tokens_per_step / times[-1], 2),
                    "tokens_per_s_steady": steady,
                    "steps": steps,
                    "steps_this_run": steps,
                    "elapsed_s": round(times[-1] + 0.1, 3),
                    "torch": "2.11.0+cu130",
                    "device_plan": {"target": ["cuda:0"], "drafter": ["cuda:0"] * threads},
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def uniform(first: float, step: float, steps: int, pause_at: int = 0, pause: float = 0.0) -> list[float]:
    return [first + step * (s - 1) + (pause if pause_at and s >= pause_at else 0.0) for s in range(1, steps + 1)]


def test_a_log_with_every_step_gives_first_step_total_pace_and_threads(tmp_path):
    run = warmup.read(write_log(tmp_path / "eager.log", uniform(2.0, 0.05, 100), 500))
    assert (run.name, run.steps, run.first_step_s) == ("eager", 100, 2.0)
    assert (run.torch, run.drafter_threads) == ("2.11.0+cu130", 3)
    assert run.elapsed_s == pytest.approx(2.0 + 0.05 * 99)  # the last step's line, not the final line's later time
    assert run.tokens == 50_000
    assert run.steady_tokens_per_s == pytest.approx(10_000, rel=1e-3)
    assert run.pace_tokens_per_s == pytest.approx(10_000, rel=1e-3)
    assert run.step_s == pytest.approx(0.05, rel=1e-3)
    assert run.pauses == ()
    assert run.warmup_s == pytest.approx(2.0 - 0.05, abs=0.01)  # the first step's time over the pace


def test_a_late_pause_is_left_out_of_the_pace_and_counted_as_warm_up(tmp_path):
    run = warmup.read(write_log(tmp_path / "ro.log", uniform(3.0, 0.01, 100, pause_at=80, pause=4.0), 400))
    assert run.steady_tokens_per_s == pytest.approx(400 * 50 / (0.01 * 50 + 4.0), rel=1e-3)  # the trainer's figure
    assert run.pace_tokens_per_s == pytest.approx(40_000, rel=1e-3)
    assert run.pauses == (Pause(80, 4.01),)
    assert run.warmup_s == pytest.approx(3.0 - 0.01 + 4.0, abs=0.01)


def test_a_log_with_sparse_metrics_lines_paces_on_the_trainers_steady_figure(tmp_path):
    run = warmup.read(write_log(tmp_path / "lb.log", uniform(80.0, 0.03, 300), 1000, every=100))
    assert run.first_step_s == 80.0
    assert run.pauses is None
    assert run.pace_tokens_per_s == run.steady_tokens_per_s
    assert run.step_s == pytest.approx(0.03, rel=1e-3)
    assert "? (not every step logged)" in warmup.row(run, run)


def test_a_run_cut_short_without_a_final_line_reads_from_its_last_metrics_line(tmp_path):
    run = warmup.read(write_log(tmp_path / "cut.log", uniform(1.0, 0.1, 10), 100, final=False))
    assert (run.steps, run.elapsed_s, run.torch, run.drafter_threads) == (10, pytest.approx(1.9), None, None)


def _summary(warm: float, pace: float, per_step: int = 100) -> RunSummary:
    steps = 1000
    tokens = steps * per_step
    return RunSummary(
        name="x",
        steps=steps,
        steps_this_run=steps,
        first_step_s=warm,
        elapsed_s=warm + tokens / pace,
        tokens=tokens,
        steady_tokens_per_s=pace,
        pace_tokens_per_s=pace,
        step_s=per_step / pace,
        pauses=(),
        torch=None,
        drafter_threads=None,
    )


def test_break_even_is_the_first_step_count_where_the_run_has_spent_less_than_the_base():
    base, run = _summary(1.0, 1000.0), _summary(11.0, 2000.0)
    # 10 s more warm-up, 0.5 ms saved per token: 20,000 tokens = 200 steps of 100 tokens to draw level
    assert break_even(run, base) == 201
    assert break_even(base, run) is None  # slower per token: never
    assert break_even(_summary(0.5, 2000.0), base) == 0  # less warm-up and faster: at once


def test_the_command_prints_one_row_per_run_and_bad_input_is_one_error_line(tmp_path, capsys):
    base = write_log(tmp_path / "eager.log", uniform(1.0, 0.05, 100), 500)
    fast = write_log(tmp_path / "compiled.log", uniform(30.0, 0.025, 100), 500)
    assert main(["warmup", str(base), str(fast)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == ["| run", "| eager", "| compiled"]
    assert rows[1].split(" | ")[10] == "base"
    # 29.025 s more warm-up (29.975 - 0.95) at 5e-5 s saved per token: 580,500 tokens, 1161 steps of 500
    assert int(rows[2].split(" | ")[10]) == pytest.approx(1162, abs=1)
    assert main(["warmup", str(base), str(tmp_path / "missing.log")]) == 2
    (tmp_path / "empty.log").write_text("samples loaded: 1\nerror: nothing\n")
    assert main(["warmup", str(tmp_path / "empty.log"), str(base)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("error: ") and "missing.log" in err[0]
    assert err[1].startswith("error: ") and "no trainer metrics lines" in err[1]


def _events(path: Path) -> tuple[dict[int, dict], dict]:
    """The log's JSON lines, read here without the module under test."""
    metrics, final = {}, {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        at = line.find('{"event": ')
        if at >= 0:
            event = json.loads(line[at:])
            if event["event"] == "metrics":
                metrics[event["step"]] = event
            elif event["event"] == "final":
                final = event
    return metrics, final


RUNS = ("eager3", "eager1", "rec3-cold", "rec3-warm", "ro1")


@pytest.mark.skipif(not MEASURED.is_dir(), reason=f"no measured logs at {MEASURED}")
def test_the_table_of_the_committed_h200_logs_prints_what_the_logs_hold(capsys):
    assert main(["warmup", *(str(MEASURED / f"{name}.log") for name in RUNS)]) == 0
    rows = {
        cells[0]: cells
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| run")
        )
    }
    assert list(rows) == list(RUNS)
    for name in RUNS:
        metrics, final = _events(MEASURED / f"{name}.log")
        cells = rows[name]
        assert cells[1] == final["torch"] == "2.11.0+cu130"
        assert cells[2] == str(len(final["device_plan"]["drafter"]))
        assert cells[3] == f"{metrics[1]['elapsed_s']:.2f}"
        assert cells[4] == f"{metrics[final['steps']]['elapsed_s']:.2f}"
        assert cells[5] == f"{final['tokens_per_s_steady']:,.0f}"
    assert [rows[name][2] for name in RUNS] == ["3", "1", "3", "3", "1"]
    # The cold compile's first step waits on Inductor; the warm cache's does not; eager's hardly at all.
    first = {name: float(rows[name][3]) for name in RUNS}
    assert first["rec3-cold"] > 60 > first["rec3-warm"] > first["eager3"]
    # Compiled three-thread runs beat eager per token and pay back later from a cold cache.
    assert float(rows["rec3-warm"][8]) > 1.3 and float(rows["rec3-cold"][8]) > 1.3
    assert int(rows["rec3-cold"][10]) > int(rows["rec3-warm"][10]) > 0
    assert rows["rec3-cold"][11] == "none" and rows["ro1"][11].endswith("@206")
