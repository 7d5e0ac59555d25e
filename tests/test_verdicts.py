"""Verdicts a user acts on, for programs written outside the harness: a library's own noise is no
failure, a run that shows a race fails whatever its exit code, a foreign program's exit codes mean
only zero, non-zero or a signal, a harness frame in a failing stack is the harness's defect, a
deterministic failure in any thread stops stress, Ctrl-C exits 130, and a fix arm's records say
which fixes ran."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.trial.blocking import FIX_LOCK_TEXTS
from harness.trial.classify import classify
from harness.trial.ending import Ending
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
F2_MESSAGE = "Detected that you are using FX to symbolically trace a dynamo-optimized function. This is not supported at the moment."

# A library (anything under a site-packages folder) whose pool and thread fail as they shut down,
# as Inductor's compile pool fails its pending Futures with `SubprocPool closed` at exit.
NOISY_LIBRARY = """
import threading
from concurrent.futures import ThreadPoolExecutor

def _closing():
    raise RuntimeError("SubprocPool closed")

def start():
    pool = ThreadPoolExecutor(1, thread_name_prefix="InductorSubproc")
    pool.submit(_closing)  # nobody reads it
    pool.shutdown(wait=True)
    t = threading.Thread(target=_closing, name="library-reader")
    t.start(); t.join()
"""


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def _trial(tmp_path: Path, code: str, name: str = "t", **kw) -> TrialResult:
    spec = TrialSpec(
        trial_id=name,
        cell=name,
        workload=WorkloadSpec(kind="command", argv=(PY, "-c", code)),
        timeout_s=60,
        hang_s=30,
        **kw,
    )
    return run_trial(spec, tmp_path / name)


def test_a_librarys_own_pool_and_thread_failing_at_exit_are_noise_not_the_programs_failure(tmp_path):
    lib = tmp_path / "venv" / "lib" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "noisylib.py").write_text(NOISY_LIBRARY)
    code = f"import sys; sys.path.insert(0, {str(lib)!r}); import noisylib; noisylib.start(); print('served')"
    result = _trial(tmp_path, code)
    assert result.outcome is Outcome.OK and result.thread_errors is None, result.detail
    assert {n["thread"].split(" ")[0] for n in result.noise} == {"InductorSubproc_0", "library-reader"}
    assert all(n["message"] == "SubprocPool closed" and n["created_at"] for n in result.noise)
    # The bootstrap printed nothing of the unread Future (the program would not have).
    output = (tmp_path / "t" / "output.txt").read_text()
    assert "never read" not in output and "InductorSubproc" not in output


def test_the_programs_own_unread_future_still_fails_the_run(tmp_path):
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def job():\n    raise ValueError('dropped')\n"
        "with ThreadPoolExecutor(1) as pool:\n    pool.submit(job)\n"
    )
    result = _trial(tmp_path, code)
    assert result.outcome is Outcome.CRASH and result.thread_errors == 1 and result.noise is None
    assert result.threads_started == 1


def test_a_foreign_programs_exit_2_and_3_are_its_failures_not_the_contracts(tmp_path):
    for rc in (2, 3):
        code = f"import sys; print('error: my own usage message'); sys.exit({rc})"
        foreign = _trial(tmp_path, code, name=f"f{rc}", foreign=True)
        assert foreign.outcome is Outcome.CRASH and foreign.detail == f"exit {rc}", foreign.detail
    # The trainer's and the repros' contract still reads exit 2 as rejected input.
    ours = _trial(tmp_path, "import sys; print('error: bad flag'); sys.exit(2)", name="ours")
    assert ours.outcome is Outcome.HARNESS_ERROR


def test_a_failure_raised_in_the_harnesss_own_code_is_a_harness_defect(tmp_path):
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/app.py", line 9, in <module>\n    traced = symbolic_trace(model)\n'
        '  File "/opt/dflash-races/harness/runtime/fixes.py", line 120, in wrapper\n    key = tuple(a.shape)\n'
        "torch.fx.proxy.TraceError: Proxy object cannot be iterated\n"
    )
    result = TrialResult(trial_id="t", cell="c", trial_index=0, outcome=Outcome.OK, rc=1)
    classify(result, Ending(how="exited", elapsed_s=1.0, last_progress_s=1.0), text, foreign=True)
    assert result.outcome is Outcome.HARNESS_ERROR
    assert result.detail.startswith("harness defect: torch.fx.proxy.TraceError: Proxy object cannot be iterated at ")
    assert "harness/runtime/fixes.py:120 in wrapper" in result.detail


def test_a_race_logged_at_exit_0_fails_its_arm_and_the_table_names_it(tmp_path):
    # A program that catches a race's exception, logs it and exits 0 (what a tool-calling loop
    # reading future.exception() does): the race happened, so the run failed.
    code = f"import logging; logging.error('call 3 failed: RuntimeError: {F2_MESSAGE}'); print('done')"
    p = _cli("stress", "-p", "1", "--max-runs", "2", "--fix", "none", "--fix", "global-lock",
             "-o", str(tmp_path / "o"), "--", "python", "-c", code)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    rows = {
        line.split()[0]: line.split() for line in p.stdout.splitlines() if line.startswith(("none ", "global-lock "))
    }
    assert rows["none"][1] == "2/2" and rows["global-lock"][1] == "2/2", p.stdout
    assert rows["none"][-2:] == ["F2", "2"] and rows["global-lock"][-2:] == ["F2", "2"], p.stdout
    assert "rule of three" not in p.stdout


def test_a_fix_arms_records_say_which_fixes_and_plan_ran(tmp_path):
    p = _cli("stress", "-p", "1", "--max-runs", "1", "--plan", "switch", "--fix", "none", "--fix", "global-lock",
             "-o", str(tmp_path / "o"), "--", "python", "-c", "raise SystemExit(1)")  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    records = {
        int(d.name): json.loads((d / "result.json").read_text()) for d in (tmp_path / "o").iterdir() if d.is_dir()
    }
    assert (records[0]["fixes"], records[0]["strategy"], records[0]["plan"]) == ([], "raw", "switch")
    assert (records[1]["fixes"], records[1]["strategy"], records[1]["plan"]) == (
        ["global-lock"],
        "global-lock",
        "switch",
    )


def test_a_worker_threads_failure_the_same_every_run_is_deterministic(tmp_path):
    code = (
        "import threading\n"
        "def start():\n    raise ValueError('config key missing')\n"
        "t = threading.Thread(target=start, name='loader'); t.start(); t.join(); print('exit 0')\n"
    )
    p = _cli("stress", "-p", "1", "--max-runs", "20", "-o", str(tmp_path / "o"), "--", "python", "-c", code)
    assert p.returncode == 1
    assert p.stdout.startswith("a deterministic failure, not a race: each of the first 3 runs failed the same way")
    assert "3 runs completed" in p.stdout and "possibly new" not in p.stdout, p.stdout


def test_a_races_message_from_a_program_with_no_thread_is_the_programs_own(tmp_path):
    code = f"raise RuntimeError({F2_MESSAGE!r})"
    p = _cli("stress", "-p", "1", "--max-runs", "20", "-o", str(tmp_path / "o"), "--", "python", "-c", code)
    assert p.returncode == 1
    assert p.stdout.startswith("your program fails this way on its own, not by a race: it started no thread"), p.stdout
    assert "though the message is F2's" in p.stdout and "3 runs completed" in p.stdout


def test_a_plan_that_reached_no_point_says_it_did_nothing(tmp_path):
    p = _cli("stress", "-p", "1", "--max-runs", "2", "--plan", "pct2", "--", "python", "-c", "print('no torch')")
    assert p.returncode == 0
    assert "the plan did nothing here: no run reached any of pct2's points" in p.stdout, p.stdout
    assert "(rule of three, plain runs)" in p.stdout


def test_ctrl_c_exits_130_and_keeps_no_run_it_killed(tmp_path):
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [PY, "-m", "harness", "stress", "-p", "1", "-o", str(out), "--", "python", "-c", "import time; time.sleep(60)"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out / "0" / "output.txt").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the run is under way
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted: killed 1 running run(s), not counted" in stderr
    assert "0 runs completed" in stdout and not (out / "0").exists()


def test_a_thread_header_after_another_threads_caret_markers_names_the_thread():
    from harness.trial.tracebacks import parse_tracebacks

    text = (
        "Exception in thread ^^^^Thread-12:\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/app.py", line 3, in run\n    serve()\n'
        "ValueError: lost\n"
    )
    assert [tb.thread for tb in parse_tracebacks(text)] == ["Thread-12"]


def test_diagnose_names_the_fixs_deadlock_and_a_harness_defect_never_the_programs(tmp_path):
    from harness.diagnosis import diagnose

    def folder(name: str, **fields) -> str:
        run = tmp_path / name
        run.mkdir()
        record = {"trial_id": f"stress/{name}", "cell": "stress:global-lock@-", "trial_index": 0, **fields}
        (run / "result.json").write_text(json.dumps(record))
        (run / "output.txt").write_text("")
        return str(run)

    hang = folder(
        "0",
        outcome="hang",
        # As trial.runner writes it: the hang kind's text after the dump's method.
        detail=f"no progress for 60.0 s; dump by py-spy; {FIX_LOCK_TEXTS[0]}: MainThread holds global-lock",
        hang_kind="fix-lock-cycle",
    )
    defect = folder(
        "1",
        outcome="harness_error",
        detail="harness defect: TraceError: Proxy object cannot be iterated at harness/runtime/fixes.py:1 in key",
    )
    verdicts = [f.verdict() for f in diagnose.diagnose(diagnose.collect([hang, defect]))]
    assert any(v.startswith("the fix deadlocks this program, not a race of yours") for v in verdicts), verdicts
    assert any(
        v.startswith("a harness defect, not your program's failure: harness defect: TraceError") for v in verdicts
    )


def test_a_program_run_from_its_installed_package_owns_its_threads(tmp_path):
    # `python -m mypkg.serve` with mypkg under site-packages: its threads are the program's, not a library's.
    pkg = tmp_path / "venv" / "lib" / "site-packages" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "serve.py").write_text(
        "import threading\n"
        "def work():\n    raise ValueError('request lost')\n"
        "t = threading.Thread(target=work, name='server-0'); t.start(); t.join()\n"
    )
    spec = TrialSpec(
        trial_id="pkg",
        cell="pkg",
        workload=WorkloadSpec(kind="command", argv=(PY, "-m", "mypkg.serve")),
        env={"PYTHONPATH": str(pkg.parent)},
        timeout_s=60,
        hang_s=30,
        foreign=True,
    )
    result = run_trial(spec, tmp_path / "pkg")
    assert result.outcome is Outcome.CRASH and result.thread_errors == 1 and result.noise is None, result.detail


def test_a_fix_context_closed_in_another_thread_before_a_segfault_is_no_harness_defect():
    # H200, torch 2.11.0+cu130, 2026-12-05 (gpu_pipeline_stage_threads under cstash-tls-init,global-lock):
    # a finaliser closed the stage thread's global-lock context in another thread (`Exception ignored
    # in`, the lock's thread-local gone), then the stage thread segfaulted in the harness's call.
    # The native crash is the run's failure (stash-refcount's face), not the harness's.
    text = (ROOT / "tests" / "fixtures" / "native" / "gpu_fix_context_closed_by_another_thread.txt").read_text()
    assert "Exception ignored in: <generator object FixSet.around_call" in text
    result = TrialResult(trial_id="t", cell="c", trial_index=0, outcome=Outcome.OK, rc=-11)
    classify(result, Ending(how="exited", elapsed_s=14.0, last_progress_s=14.0), text, foreign=True)
    assert result.outcome is Outcome.ABORT, result.detail
    assert not result.detail.startswith("harness defect"), result.detail
