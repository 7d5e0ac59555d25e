"""run_trial drives the tiny programs in tests/scripts through every outcome.

Each test checks what a person reading the store would see: the outcome, a signature that is
the same for two runs of the same program, the hang dump, and that no process of the trial's
group is left behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from harness.inject import ENV_FIXES
from harness.trial import hangs
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import child_env, run_trial
from harness.trial.spec import REPO_ROOT, InvalidSpec, TrialSpec, WorkloadSpec, argv_for

SCRIPTS = Path(__file__).parent / "scripts"
HANG_S = 2.0
"""For the scripts that hang: small, so the suite is fast."""
QUIET_S = 10.0
"""For the others: above Python's start-up time on a loaded 2-core box, so no false HANG."""


def _spec(script: str, *args: str, hang_s: float = QUIET_S, timeout_s: float = 30.0, **kw) -> TrialSpec:
    argv = (sys.executable, str(SCRIPTS / f"{script}.py"), *args)
    return TrialSpec(
        trial_id=f"{script}-{len(args)}",
        cell=script,
        timeout_s=timeout_s,
        hang_s=hang_s,
        workload=WorkloadSpec(kind="command", argv=argv),
        **kw,
    )


def _code_spec(name: str, code: str, **kw) -> TrialSpec:
    """A trial of `python -c CODE`, named `name`."""
    return TrialSpec(
        trial_id=name, cell=name, workload=WorkloadSpec(kind="command", argv=(sys.executable, "-c", code)), **kw
    )


def _run(tmp_path: Path, script: str, *args: str, run: int = 0, **kw) -> TrialResult:
    return run_trial(_spec(script, *args, **kw), tmp_path / f"{script}-{run}")


def _output(result: TrialResult) -> str:
    return (Path(result.artefacts) / "output.txt").read_text()


def _assert_group_gone(result: TrialResult) -> None:
    """The trial's process group (pgid = the child's pid) and any grandchild are gone."""
    text = _output(result)
    pid = int(re.search(r"^pid=(\d+)$", text, re.M).group(1))
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    for gc in re.findall(r"^grandchild=(\d+)$", text, re.M):
        with pytest.raises(ProcessLookupError):
            os.kill(int(gc), 0)


def test_ok_run_reports_final_json(tmp_path):
    result = _run(tmp_path, "ok")
    assert result.outcome is Outcome.OK and result.rc == 0
    # the steady-state rate wins over the whole-run rate when the workload reports both
    assert result.tokens_per_s == 1500.0 and result.final["steps"] == 1
    assert result.signature is None and not result.skipped
    assert json.loads((tmp_path / "ok-0" / "spec.json").read_text())["cell"] == "ok"
    _assert_group_gone(result)


def test_a_record_says_its_workload_fixes_and_plan_as_fields(tmp_path):
    result = run_trial(dataclasses.replace(_spec("ok"), cell="w:raw@switch"), tmp_path / "t")
    assert result.outcome is Outcome.OK
    assert (result.workload, result.fixes, result.plan) == ("w", [], "switch")
    # a spec the runner refuses (fixes on a command that is no Python program) still says what was asked for
    refused = run_trial(
        dataclasses.replace(
            _spec("ok", fixes=("global-lock",)),
            cell="w:global-lock@-",
            workload=WorkloadSpec(kind="command", argv=("/bin/true",)),
        ),
        tmp_path / "u",
    )
    assert refused.outcome is Outcome.HARNESS_ERROR
    stored = TrialResult.from_json(json.loads(json.dumps(refused.to_json())))
    assert (stored.workload, stored.fixes, stored.plan) == ("w", ["global-lock"], "-")
    # a record stored before the fields gets them from its cell's name
    old = TrialResult.from_json({"trial_id": "x", "cell": "w:raw+global-lock@p", "trial_index": 0, "outcome": "ok"})
    assert (old.workload, old.strategy, old.fixes, old.plan) == ("w", "raw+global-lock", ["global-lock"], "p")


def test_a_failed_runs_last_event_stands_in_for_final_and_gives_no_throughput():
    from harness.trial.classify import classify
    from harness.trial.ending import Ending

    text = (
        '{"event": "step", "tokens_per_s": 5.0}\n'
        '{"event": "failed", "gpu_mem_peak_gib": {"cuda:0": 31.5}}\nTraceback (most recent call last):\n'
        '  File "x.py", line 1, in <module>\nValueError: boom\n'
    )
    result = TrialResult(trial_id="t/c/0", cell="c", trial_index=0, outcome=Outcome.OK, rc=1)
    classify(result, Ending(how="exited", elapsed_s=1.0, last_progress_s=1.0), text)
    assert result.outcome is Outcome.CRASH and result.final["gpu_mem_peak_gib"] == {"cuda:0": 31.5}
    assert result.tokens_per_s is None
    # A final event wins over a failed one (a run that recovered is not this case, but be sure).
    both = text.replace('{"event": "step"', '{"event": "final", "tokens_per_s": 7.0}\n{"event": "step"')
    classify(
        result := TrialResult(trial_id="t/c/1", cell="c", trial_index=1, outcome=Outcome.OK, rc=0),
        Ending(how="exited", elapsed_s=1.0, last_progress_s=1.0),
        both,
    )
    assert result.final["event"] == "final" and result.tokens_per_s == 7.0


@pytest.mark.parametrize(
    "script, outcome, sig_name, exc_type",
    [
        ("crash", Outcome.CRASH, None, "ValueError"),
        ("abort", Outcome.ABORT, "SIGABRT", "Aborted"),
        ("segfault", Outcome.ABORT, "SIGSEGV", "Segmentation fault"),
        ("wrong_result", Outcome.WRONG_RESULT, None, "WRONG_RESULT"),
    ],
)
def test_failure_outcome_and_stable_signature(tmp_path, script, outcome, sig_name, exc_type):
    first = _run(tmp_path, script, run=0)
    second = _run(tmp_path, script, run=1)
    for result in (first, second):
        assert result.outcome is outcome, result.detail
        assert result.outcome.is_failure
        assert result.signal == sig_name and result.exc_type == exc_type
        assert result.time_to_failure_s is not None
        _assert_group_gone(result)
    assert first.signature == second.signature
    assert first.signature_summary == second.signature_summary


def test_crash_signature_names_thread_role_and_frames(tmp_path):
    result = _run(tmp_path, "crash")
    assert "ValueError in worker at crash:load_batch < crash:worker" in result.signature_summary
    assert "<int>" in result.signature_summary and "<hex>" in result.signature_summary


def test_abort_signature_names_crashing_frame(tmp_path):
    assert _run(tmp_path, "abort").signature_summary == "Aborted at abort:give_up"


@pytest.mark.parametrize("kind, exc_type", [("oom", "torch.OutOfMemoryError"), ("cublas", "RuntimeError")])
def test_device_memory_exhaustion_is_resource_not_a_race(tmp_path, kind, exc_type):
    # H200 campaign: 23/115 trials crashed so with 12 trials on the GPU
    # (docs/log/2026-11-29-h200-campaign-first-115-trials.md).
    result = _run(tmp_path, "oom", kind)
    assert result.outcome is Outcome.RESOURCE, result.detail
    assert not result.outcome.is_failure and not result.outcome.counts_as_trial
    assert result.exc_type == exc_type and result.signature  # which allocation failed is kept
    # a plain crash with a different message stays a CRASH
    assert _run(tmp_path, "crash").outcome is Outcome.CRASH


def test_stored_crash_of_exhaustion_loads_as_resource():
    # Records stored before RESOURCE existed summarize like new ones.
    base = dict(
        trial_id="t",
        cell="c",
        trial_index=0,
        outcome="crash",
        exc_type="torch.AcceleratorError",
        signature_summary="out of memory (torch.AcceleratorError in ? at torch.nn.modules.module:convert)",
    )
    assert TrialResult.from_json(base).outcome is Outcome.RESOURCE
    assert TrialResult.from_json({**base, "outcome": "hang"}).outcome is Outcome.HANG
    assert (
        TrialResult.from_json(
            {**base, "signature_summary": "AssertionError in dflash-train at torch._inductor.cudagraph_trees:get_obj"}
        ).outcome
        is Outcome.CRASH
    )


def test_workload_rejecting_input_is_harness_error(tmp_path):
    result = _run(tmp_path, "bad_input")
    assert result.outcome is Outcome.HARNESS_ERROR and result.rc == 2
    assert result.detail == "workload rejected its input: error: unknown preset 'nope'"
    assert not result.outcome.is_failure


def test_skip_line_is_ok_flagged_skipped(tmp_path):
    result = _run(tmp_path, "skip")
    assert result.outcome is Outcome.OK and result.skipped
    assert result.detail == "skipped: needs CUDA"


def test_deadlock_is_hang_with_dump_of_both_threads(tmp_path):
    first = _run(tmp_path, "deadlock", run=0, hang_s=HANG_S)
    second = _run(tmp_path, "deadlock", run=1, hang_s=HANG_S)
    for result in (first, second):
        assert result.outcome is Outcome.HANG and result.rc == -signal.SIGKILL
        dump = (Path(result.artefacts) / "hang_dump.txt").read_text()
        assert re.search(r"^1 thread: locker-0 .*\n(?:    .*\n)*?    take_a_then_b \(", dump, re.M)
        assert re.search(r"^1 thread: locker-1 .*\n(?:    .*\n)*?    take_b_then_a \(", dump, re.M)
        assert (Path(result.artefacts) / "pyspy.json").is_file()
        _assert_group_gone(result)
    assert first.signature == second.signature
    assert "locker@deadlock:take_a_then_b" in first.signature_summary
    assert "locker@deadlock:take_b_then_a" in first.signature_summary


@pytest.mark.parametrize(
    "script, hang_kind, said",
    [
        (
            "deadlock",
            "own-lock-cycle",
            ("a deadlock in the program's own locks", "locker-0 on a lock at take_a_then_b"),
        ),
        ("lost_wakeup", "own-lost-wakeup", ("consumer-0 on Queue.get at consume",)),
    ],
    ids=["deadlock-own-lock-cycle", "lost-wakeup-own-queue"],
)
def test_a_hang_in_the_programs_own_sync_says_which(tmp_path, script, hang_kind, said):
    result = _run(tmp_path, script, hang_s=HANG_S)
    assert result.outcome is Outcome.HANG and result.hang_kind == hang_kind, result.detail
    for words in said:
        assert words in result.detail


def test_a_deadlock_that_printed_a_line_is_a_hang_at_the_deadline_too(tmp_path):
    # hang_s as long as the deadline (stress's old default): the line printed at start used to
    # make it TIMEOUT "still progressing".
    result = _run(tmp_path, "deadlock", hang_s=4.0, timeout_s=4.0)
    assert result.outcome is Outcome.HANG, result.detail


@pytest.mark.parametrize(
    "script, timeout_s, said",
    [
        ("busy_hang", 5.0, ("cores busy", "spinner-0 in busy_hang:spin")),
        ("busy_child", 6.0, ("busiest: pid",)),
    ],
    ids=["busy-loop-says-where-it-spins", "silent-waiting-on-a-busy-child"],
)
def test_a_busy_program_past_its_deadline_is_timeout_never_a_hang(tmp_path, script, timeout_s, said):
    result = _run(tmp_path, script, hang_s=HANG_S, timeout_s=timeout_s)
    assert result.outcome is Outcome.TIMEOUT, result.detail
    assert all(words in result.detail for words in said), result.detail
    _assert_group_gone(result)


def test_thread_exceptions_at_exit_0_are_a_crash_with_every_thread_counted(tmp_path):
    result = _run(tmp_path, "thread_dies_exit0")
    assert result.rc == 0 and result.outcome is Outcome.CRASH, result.detail
    assert result.thread_errors == 2
    assert result.detail.startswith("exit 0, but 2 uncaught exception(s) in thread(s) worker-0, worker-1")
    assert result.signature_summary.startswith("RuntimeError in worker at")
    assert [f["count"] for f in result.failures] == [2]


def test_every_distinct_failure_of_a_run_is_kept(tmp_path):
    result = _run(tmp_path, "two_failures")
    assert result.outcome is Outcome.CRASH
    assert [f["exc_type"] for f in result.failures] == ["KeyError", "ValueError"]


def test_progress_past_deadline_is_timeout_not_failure(tmp_path):
    result = _run(tmp_path, "slow_progress", hang_s=3.0, timeout_s=4.0)
    assert result.outcome is Outcome.TIMEOUT, result.detail
    assert not result.outcome.is_failure and result.signature is None
    assert 4.0 <= result.duration_s < 10
    assert (Path(result.artefacts) / "hang_dump.txt").is_file()
    _assert_group_gone(result)


@pytest.mark.parametrize("mode, outcome", [("exit", Outcome.OK), ("hang", Outcome.HANG)])
def test_grandchild_ignoring_sigterm_does_not_survive(tmp_path, mode, outcome):
    result = _run(tmp_path, "grandchild", mode, hang_s=HANG_S if mode == "hang" else QUIET_S)
    assert result.outcome is outcome
    assert re.search(r"^grandchild=\d+$", _output(result), re.M)
    _assert_group_gone(result)


def test_faulthandler_fallback_when_pyspy_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(hangs, "find_pyspy", lambda: None)
    result = _run(tmp_path, "deadlock", hang_s=HANG_S)
    assert result.outcome is Outcome.HANG
    dump = (Path(result.artefacts) / "hang_dump.txt").read_text()
    assert dump.startswith("faulthandler dump")
    assert "take_a_then_b (" in dump and "take_b_then_a (" in dump
    assert "# py-spy not found" in dump
    _assert_group_gone(result)


def test_invalid_spec_is_harness_error_and_runs_nothing(tmp_path):
    result = run_trial(_spec("ok", hang_s=-1.0), tmp_path / "bad")
    assert result.outcome is Outcome.HARNESS_ERROR and result.rc is None
    assert result.detail == "invalid spec: hang_s: expected a positive number of seconds, got -1.0"
    assert not (tmp_path / "bad" / "output.txt").exists()


def test_after_exit_hook_sees_the_result(tmp_path):
    seen: list[TrialResult] = []
    result = run_trial(_spec("ok"), tmp_path / "hook", after_exit=seen.append)
    assert seen == [result]


def test_child_environment_and_plan_file(tmp_path):
    code = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "('PYTHONPATH', 'HARNESS_PLAN', 'HARNESS_HEARTBEAT', 'HARNESS_PLAN_LOG', "
        "'PYTHONFAULTHANDLER', 'EXTRA')}))"
    )
    spec = _code_spec("env", code, plan={"seed": 7, "rules": []}, env={"EXTRA": "1"}, hang_s=5)
    result = run_trial(spec, tmp_path / "env")
    seen = json.loads(_output(result).strip().splitlines()[-1])
    art = tmp_path / "env"
    assert seen["PYTHONPATH"].split(os.pathsep)[:2] == [
        str(REPO_ROOT / "harness" / "trial" / "bootstrap"),
        str(REPO_ROOT),
    ]
    # The bootstrap took the plan out of the program's environment once installed (see below).
    assert seen["HARNESS_PLAN"] is None and child_env(spec, art)["HARNESS_PLAN"] == str(art / "plan.json")
    assert json.loads((art / "plan.json").read_text()) == {"seed": 7, "rules": []}
    assert seen["HARNESS_HEARTBEAT"] == str(art / "heartbeat")
    assert seen["HARNESS_PLAN_LOG"] == str(art / "plan_log.jsonl")
    assert seen["PYTHONFAULTHANDLER"] == "1" and seen["EXTRA"] == "1"
    assert result.plan_seed == 7


def test_a_process_the_program_starts_elsewhere_runs_unplanned(tmp_path, monkeypatch):
    """torch 2.11's Inductor checks the CPU's vector ISA with `python -c "import torch ..."` run in
    its cache folder. With the trial's artefacts given as a relative path (a store named
    `results/...`), that process inherited a plan path it could not open and exited 2: the ISA
    check failed and every flex-attention compile of r25 with it, 10/10 on 2.11."""
    monkeypatch.chdir(tmp_path)
    probe = "import os; print(os.environ.get('HARNESS_PLAN'), os.environ.get('HARNESS_FIXES'))"
    code = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '-c', {probe!r}], cwd='/', capture_output=True, text=True); "
        "print('child', r.returncode, r.stdout.strip(), r.stderr.strip()[-200:])"
    )
    spec = _code_spec("sub", code, plan={"seed": 1, "rules": []}, fixes=("global-lock",), hang_s=20)
    result = run_trial(spec, Path("relative") / "sub")
    assert result.outcome is Outcome.OK, result.detail
    assert "child 0 None None" in _output(result), _output(result)[-2000:]
    assert os.path.isabs(child_env(spec, Path("relative"))["HARNESS_PLAN_LOG"])


def test_no_plan_means_no_plan_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_PLAN", "/elsewhere/plan.json")
    assert "HARNESS_PLAN" not in child_env(_spec("ok"), tmp_path)


def test_a_commands_fixes_reach_its_bootstrap_as_the_spec_says(tmp_path, monkeypatch):
    """None: the program as it is (no fix layer); (): the guard with no fix; names: those fixes. A
    value in the environment the harness runs in is never passed on."""
    monkeypatch.setenv(ENV_FIXES, "stale")
    said = {
        fixes: child_env(_code_spec("f", "pass", fixes=fixes), tmp_path).get(ENV_FIXES)
        for fixes in (None, (), ("global-lock",))
    }
    assert said == {None: None, (): "none", ("global-lock",): "global-lock"}
    dflash = TrialSpec(trial_id="d", cell="d", workload=WorkloadSpec(kind="dflash", argv=("--preset", "tiny")))
    assert ENV_FIXES not in child_env(dflash, tmp_path) and argv_for(dflash)[-1] == "fixes="


def test_a_spec_of_format_1_reads_as_it_ran():
    """Before the field said None, `--fix none` rode the environment and a command with no fixes ran
    as it is; a trainer's [] was none then as now."""
    old = {
        "trial_id": "s",
        "cell": "stress:raw@-",
        "workload": {"kind": "command", "argv": [sys.executable, "-c", "1"]},
    }
    assert TrialSpec.from_json({**old, "fixes": []}).fixes is None
    none = TrialSpec.from_json({**old, "fixes": [], "env": {ENV_FIXES: "none", "X": "1"}})
    assert none.fixes == () and none.env == {"X": "1"}
    trainer = {"trial_id": "t", "cell": "c", "workload": {"kind": "dflash", "argv": []}, "fixes": []}
    assert TrialSpec.from_json(trainer).fixes == ()
    for fixes in (None, (), ("global-lock",)):
        spec = _code_spec("n", "pass", fixes=fixes)
        assert TrialSpec.from_json(json.loads(json.dumps(spec.to_json()))).fixes == fixes


# ------------------------------------------------------------------------- spec and outcome


def test_argv_for_each_workload_kind():
    dflash = TrialSpec(
        trial_id="a",
        cell="c",
        fixes=("global-lock", "graph-isolation"),
        workload=WorkloadSpec(kind="dflash", argv=("--preset", "tiny")),
    )
    assert argv_for(dflash) == [
        sys.executable,
        "-m",
        "dflash",
        "train",
        "--preset",
        "tiny",
        "--set",
        "fixes=global-lock,graph-isolation",
    ]
    raw = TrialSpec(trial_id="a", cell="c", workload=WorkloadSpec(kind="dflash"))
    assert argv_for(raw)[-2:] == ["--set", "fixes="]
    repro = TrialSpec(
        trial_id="a",
        cell="c",
        fixes=("global-lock",),
        workload=WorkloadSpec(kind="repro", argv=("r06_fx_tracing_flag", "-n", "3")),
    )
    assert argv_for(repro) == [
        sys.executable,
        str(REPO_ROOT / "repro" / "r06_fx_tracing_flag.py"),
        "-n",
        "3",
        "--fix",
        "global-lock",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"timeout_s": 0}, "timeout_s: expected a positive number of seconds, got 0"),
        ({"trial_id": ""}, "trial_id: expected a non-empty string, got ''"),
        (
            {"workload": WorkloadSpec(kind="shell", argv=("x",))},
            "workload.kind: 'shell' is not one of dflash, repro, command",
        ),
        (
            {"workload": WorkloadSpec(kind="repro", argv=("../x",))},
            "workload.argv: repro script '../x' must be a bare name",
        ),
        ({"fixes": ("a,b",)}, "fixes: invalid fix name 'a,b'"),
        (
            {"fixes": ("a",), "workload": WorkloadSpec(kind="command", argv=("/bin/true",))},
            "fixes: the command '/bin/true' is not a Python program to fix",
        ),
        ({"trial_index": -1}, "trial_index: must be >= 0, got -1"),
    ],
)
def test_invalid_spec_names_the_field(change, message):
    spec = dataclasses.replace(_spec("ok"), **change)
    with pytest.raises(InvalidSpec) as info:
        spec.validate()
    assert str(info.value) == message


def test_trial_spec_json_round_trip():
    spec = TrialSpec(
        trial_id="t",
        cell="c",
        fixes=("x",),
        plan={"seed": 3},
        env={"A": "b"},
        timeout_s=9.5,
        hang_s=2,
        trial_index=4,
        workload=WorkloadSpec(kind="repro", argv=("r01", "--n", "2")),
    )
    assert TrialSpec.from_json(json.dumps(spec.to_json())) == spec
    with pytest.raises(InvalidSpec, match="^spec JSON: KeyError"):
        TrialSpec.from_json({"trial_id": "t"})


def test_trial_result_json_round_trip_and_failure_predicates():
    result = TrialResult(
        trial_id="t",
        cell="c",
        trial_index=1,
        outcome=Outcome.HANG,
        signature="hang-0123456789",
        final={"event": "final"},
        skipped=True,
    )
    assert TrialResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert {o for o in Outcome if o.is_failure} == {Outcome.CRASH, Outcome.ABORT, Outcome.HANG, Outcome.WRONG_RESULT}
    assert not Outcome.TIMEOUT.counts_as_trial and Outcome.OK.counts_as_trial


def test_a_hang_the_workload_reports_itself_is_a_hang(tmp_path):
    # repro/README.md's contract: a repro whose threads outlive its deadline prints `HANG:` and
    # every stack (faulthandler), then exits 1; that is a HANG keyed by the stuck thread's frame.
    code = (
        "import faulthandler, os, sys, threading\n"
        "def stuck():\n    threading.Event().wait()\n"
        "t = threading.Thread(target=stuck, name='repro-stuck', daemon=True); t.start(); t.join(0.2)\n"
        "print('HANG: threads still alive after 0.2 s', file=sys.stderr, flush=True)\n"
        "faulthandler.dump_traceback(all_threads=True)\nos._exit(1)\n"
    )
    spec = _code_spec("h", code, timeout_s=60, hang_s=QUIET_S)
    first, second = (run_trial(spec, tmp_path / f"h{i}") for i in range(2))
    assert first.outcome is Outcome.HANG and first.rc == 1
    assert first.detail.startswith("the workload reported a hang: threads still alive after 0.2 s")
    assert first.signature == second.signature and "stuck" in first.signature_summary


def test_a_futures_exception_nobody_read_is_a_crash_at_exit_0_and_a_read_one_is_not(tmp_path):
    result = _run(tmp_path, "future_unread_exit0")
    assert result.rc == 0 and result.outcome is Outcome.CRASH, result.detail
    assert result.thread_errors == 1  # request 2's exception was read and handled
    assert "a Future's exception, never read" in result.detail
    assert result.signature_summary.startswith("ValueError in pool"), result.signature_summary


def test_a_threads_exception_keeps_the_hooks_clean_frames_where_the_output_interleaved_them():
    import dataclasses

    from harness.trial import signature
    from harness.trial.classify import hooked_version

    text = (ROOT_FIXTURES / "1.txt").read_text()
    clean = signature.crash_signature(text, rc=1)
    # What an interleaved print reads as: the same failure, other frames (another summary).
    garbled = dataclasses.replace(clean, frames=("torch._dynamo.eval_frame:compile_wrapper",) * 3)
    hooked = [{"thread": "caller-0", "traceback": text[text.index("Traceback") :]}]
    got = hooked_version(garbled, hooked)
    assert got.key == clean.key and got.summary == clean.summary != garbled.summary
    assert hooked_version(garbled, []) is garbled  # no hook records: the output's reading stands


ROOT_FIXTURES = Path(__file__).parent / "fixtures" / "tracebacks" / "f2_fx_trace_of_compiled_fn"


@pytest.mark.parametrize("main_dies", [False, True])
def test_a_programs_own_hooks_hide_no_death(tmp_path, main_dies):
    """The program's threading.excepthook and sys.excepthook print nothing: each death is still
    recorded below them (the program's hooks still ran: its own assert saw both workers)."""
    result = _run(tmp_path, "own_excepthook_exit0", *(["--main-dies"] if main_dies else []))
    assert result.outcome is Outcome.CRASH and result.rc == (1 if main_dies else 0), result.detail
    types = sorted(f["exc_type"] for f in result.failures)
    assert types == (["KeyError", "RuntimeError"] if main_dies else ["RuntimeError"]), result.failures
    assert result.thread_errors == (3 if main_dies else 2)
    assert "worker 0 failed" not in _output(result)  # the program's hooks printed nothing


@pytest.mark.parametrize("how, ending", [((), "HANG"), (("--busy",), "TIMEOUT")])
def test_a_main_threads_death_with_a_stuck_exit_is_a_crash_naming_what_held_the_exit(tmp_path, how, ending):
    """Idle (would be a hang) or busy (would be slow) past the deadline: either way the run failed
    of the main thread's exception, and the detail names the thread the exit waited for."""
    result = _run(tmp_path, "main_dies_exit_waits", *how, hang_s=HANG_S, timeout_s=6.0)
    assert result.outcome is Outcome.CRASH, (ending, result.detail)
    assert result.detail.startswith("the main thread died of NameError: module is not installed"), result.detail
    assert "then waited at exit for non-daemon thread debug-server (running main_dies_exit_waits.py:" in result.detail
    assert result.exc_type == "NameError" and result.failures[0]["exc_type"] == "NameError"


def test_a_print_inside_a_dead_threads_traceback_is_not_a_failure_of_its_own():
    """The main thread's print lands inside a worker's traceback as the hook prints it: the hook's
    record of that death stands for the garbled print (it read as an exception `done`)."""
    from harness.trial import signature

    frames = '  File "/app/job.py", line 58, in work\n    raise ValueError("expected 16 scores, got 8")\n'
    record = f"Traceback (most recent call last):\n{frames}ValueError: expected 16 scores, got 8\n"
    garbled = (
        "Exception in thread worker-1:\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner\n'
        f"done: 0 of 3 items\n    self.run()\n{frames}ValueError: expected 16 scores, got 8\n"
    )
    hooked = [f"Exception in thread worker-1:\n{record}"]
    found = signature.run_failures(garbled, extra=hooked)
    assert [f.signature.exc_type for f in found] == ["ValueError"], [f.signature.key for f in found]


def test_a_childs_native_crash_under_a_parent_stuck_at_exit_is_the_runs_abort(tmp_path):
    """The first process lives to the deadline (a non-daemon thread holds its exit): the crash its
    output shows is a child's, and it is the run's failure, not a hang of the program's own."""
    result = _run(tmp_path, "child_crash_exit_waits", hang_s=HANG_S, timeout_s=20.0)
    assert result.outcome is Outcome.ABORT, result.detail
    assert result.detail.startswith("a process the program started: Fatal Python error: Segmentation fault")
    assert "; then hang: " in result.detail and result.signal == "SIGSEGV"


@pytest.mark.parametrize("child", [False, True])
def test_a_reset_beside_live_threads_is_recorded_with_its_thread(tmp_path, child):
    result = _run(tmp_path, "reset_beside_threads", *(["--child"] if child else []), timeout_s=60.0)
    assert result.outcome is Outcome.OK, result.detail
    lines = (Path(result.artefacts) / "config_sets.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["call"], r["thread"], r["beside"] >= 1) for r in records] == [
        ("torch._dynamo.reset()", "resetter", True)
    ]
    assert ("pid" in records[0]) is child and records[0].get("process", "worker-0") == "worker-0"
