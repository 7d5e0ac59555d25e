"""One verdict: `stress`'s summary and `diagnose FOLDER` read a stress folder through the same
function, so they say the same; the fix command they print keeps the plan the failures were seen
under; a side by side whose raw set never failed gives no verdict on the fixes, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.diagnosis import diagnose
from harness.diagnosis.side_by_side import ArmCount, StressRecord, arms_verdict, held

ROOT = Path(__file__).resolve().parents[1]
F2_MESSAGE = "Detected that you are using FX to symbolically trace a dynamo-optimized function"
PROGRAMS = {
    # A plain bug in every worker, every run: deterministic, whatever reads the folder.
    "deterministic": "import threading\n"
    "def work():\n    raise ValueError('bad shard size 3')\n"
    "ts = [threading.Thread(target=work, name=f'w{i}') for i in range(2)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]\n",
    # A race's message from worker threads (no torch: fast): F2 by its message.
    "race": "import threading, random\n"
    "def work():\n"
    f"    if random.random() < 0.9: raise RuntimeError({F2_MESSAGE!r})\n"
    "ts = [threading.Thread(target=work, name=f'worker-{i}') for i in range(3)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]\n",
}
VERDICT = re.compile(r"^\s*(known|suspected|unknown|deterministic|your program|note|slow|a hang)\b.*$", re.M)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def _verdicts(text: str) -> list[str]:
    """The verdict lines, without what only the full form adds (` on torch X`)."""
    return [re.sub(r" on torch \S+$", "", m.group(0).strip()) for m in VERDICT.finditer(text)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_stress_and_diagnose_give_a_folder_the_same_verdict(tmp_path, name):
    program = tmp_path / f"{name}.py"
    program.write_text(PROGRAMS[name])
    out = tmp_path / "out"
    stress = _cli(
        "stress", "-p", "2", "--max-runs", "3", "--plan", "switch", "-o", str(out), "--", "python", str(program)
    )
    assert stress.returncode == 1, stress.stdout + stress.stderr[-2000:]
    said = _verdicts(stress.stdout)
    again = _cli("diagnose", str(out))
    assert again.returncode == 0, again.stderr
    assert said and said == _verdicts(again.stdout), (stress.stdout, again.stdout)
    if name == "deterministic":
        assert said == ["deterministic: a deterministic failure, not a race"]
    else:
        assert said[0].startswith("known: F2")
        # The fix command keeps the plan the failures were seen under.
        assert "--plan switch --fix none --fix" in stress.stdout, stress.stdout


def test_a_side_by_side_whose_raw_set_never_failed_gives_no_verdict():
    arms = [ArmCount(fixes=(), failed=0, runs=20), ArmCount(fixes=("global-lock",), failed=0, runs=20)]
    lines = arms_verdict(arms)
    assert len(lines) == 1 and lines[0].startswith("no verdict on the fixes: none did not fail in 20 runs")
    assert held(arms) == []


def test_a_fix_holds_only_against_a_raw_set_that_failed():
    arms = [
        ArmCount(fixes=(), failed=7, runs=10, races={"R5": 7}),
        ArmCount(fixes=("global-lock",), failed=0, runs=10),
        ArmCount(fixes=("nested-fx-fallback",), failed=3, runs=10, races={"R4": 3}),
    ]
    assert arms_verdict(arms) == [
        "held in your runs: global-lock 0/10 where none failed 7/10",
        "did not hold in your runs: nested-fx-fallback failed 3/10 (R4 3)",
    ]
    assert held(arms) == ["global-lock"]
    assert arms_verdict(arms[:1]) == []


def _stress_folder(tmp_path: Path, arms: list[ArmCount]) -> Path:
    """A stress folder of one failing F2 run (raw) and its record."""
    out = tmp_path / "out"
    run = out / "0"
    run.mkdir(parents=True)
    (run / "output.txt").write_text(
        f'Exception in thread worker-0:\nTraceback (most recent call last):\n  File "/app/serve.py", line 9, '
        f"in work\n    f(x)\nRuntimeError: {F2_MESSAGE}. This is not supported at the moment.\n"
    )
    result = {
        "trial_id": "stress/0",
        "cell": "stress:raw@-",
        "trial_index": 0,
        "outcome": "crash",
        "rc": 1,
        "artefacts": str(run),
        "threads_started": 2,
        "torch_version": "2.13.0+cpu",
    }
    (run / "result.json").write_text(__import__("json").dumps(result))
    StressRecord(command=("python", "serve.py"), options=("--plan", "fx-widen"), arms=tuple(arms)).write(out)
    return out


def test_after_a_fix_failed_in_the_users_runs_the_next_is_offered(tmp_path):
    arms = [
        ArmCount(fixes=(), failed=3, runs=3, races={"F2": 3}),
        ArmCount(fixes=("nested-fx-fallback",), failed=3, runs=3, races={"R4": 3}),
    ]
    text, findings = diagnose.report([str(_stress_folder(tmp_path, arms))], brief=True)
    f2 = next(f for f in findings if f.race == "F2")
    assert "tried in your runs and did not hold: nested-fx-fallback" in text, text
    assert "--fix nested-fx-fallback" not in f2.try_fixes and "--fix global-lock" in f2.try_fixes, f2.try_fixes
    assert "--plan fx-widen" in f2.try_fixes


def test_a_fix_that_held_in_the_users_runs_is_said_and_nothing_contradicts_it(tmp_path):
    arms = [
        ArmCount(fixes=(), failed=3, runs=3, races={"F2": 3}),
        ArmCount(fixes=("global-lock",), failed=0, runs=3),
    ]
    text, _ = diagnose.report([str(_stress_folder(tmp_path, arms))], brief=True)
    assert "held in your runs: global-lock" in text
    assert "no --fix holds" not in text and "try on your program" not in text, text


def test_what_is_named_as_no_race_is_not_counted_as_one(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(
        "Exception in thread Thread-1 (work):\nTraceback (most recent call last):\n"
        '  File "/tmp/prog.py", line 10, in work\n    f(x)\n'
        "torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to fullgraph=True\n"
    )
    text, _ = diagnose.report([str(log)], brief=True)
    assert text.startswith("diagnosis: 0 of 1 failing runs matched a catalogued race\n"), text
    assert "recompile limit reached (not a race by itself)" in text and "what to do: " in text
    assert "no --fix holds" not in text
