"""Programs written the way users write threads fail for real and group by race.

Each tests/scripts/user_*.py hits a CPU race of torch 2.13 (F2/R1, R4, R5: docs/glossary.md) from a
different program shape: Thread subclasses, ThreadPoolExecutor and `future.result()`,
asyncio.to_thread, daemon threads, logging.exception, `traceback.format_exc()` behind a log prefix,
a worker pool fed by a queue, errors kept in a list and raised again, ExceptionGroup, chained
exceptions, a printed error followed by a segfault. Each runs through the harness's own runner
(`harness.trial.runner.run_trial`, as `harness stress` runs a user's command) until it fails, at
most MAX_RUNS times, and must give the signature key of the project's own real output of its race
(tests/fixtures/tracebacks), the race's family, the failing thread's role (empty where the output
does not say which thread) and the frames where torch raised it, never the frames of the thread that
printed or re-raised it.

A native crash lands wherever the race met the other thread: R5's program crashed in
`compile_wrapper`, in `guards:invalidate` (CI, 2026-12-04, a frame outside the keys this test then
knew), or raised a TypeError first. A race is named by its family (crash sites, native frames,
faces), so R5's program is checked on stored runs of several crash sites
(tests/fixtures/race_families/r5_crash_sites), never on whichever frame a live run crashes in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from stress_cli import stress_argv

from harness.diagnosis import diagnose
from harness.diagnosis.families import family
from harness.trial.folder import OUTPUT
from harness.trial.runner import run_trial
from harness.trial.signature import crash_signature
from harness.trial.spec import TrialSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
FIXTURES = ROOT / "tests" / "fixtures" / "tracebacks"
MAX_RUNS = 3
"""Every program failed in each of 3 runs when the corpus was measured; R5's runs may crash later."""

F2_AT = "torch._dynamo.eval_frame:compile_wrapper"
R4_AT = (
    "torch.fx._symbolic_trace:path_of_module",
    "torch.fx._symbolic_trace:call_module",
    "torch.fx._symbolic_trace:module_call_wrapper",
)
REFERENCE = {
    # race: fixture folders of this project's own runs of it (one key each: an exception's key is
    # its message's, wherever it was raised).
    "F2": ("f2_fx_trace_of_compiled_fn",),
    "R4": ("r4_eager_module_nameerror",),
}
FAMILY_RUNS = ROOT / "tests" / "fixtures" / "race_families" / "r5_crash_sites"
STORED = {"user_r5_cache_cleaner.py": "R5"}
"""Programs whose race is a native crash, checked on stored runs (FAMILY_RUNS) instead of a live run."""
R5_OUTPUTS = (
    # R5's faces in this project's own outputs (tests/fixtures/tracebacks): a segfault in
    # compile_wrapper, its SIGFPE twin, R6's NameError then the segfault, a TypeError from the
    # cleared cache entry then a segfault at exit in guards:invalidate.
    "r5_reset_segfault",
    "r5_reset_fpe",
    "r5_reset_segfault_after_nameerror",
    "r5_reset_typeerror_then_segfault",
)


@dataclass(frozen=True)
class Program:
    script: str
    race: str
    role: str | None
    """The signature's thread role; "" where the output does not name the thread; None: either
    face of R5 (a native crash has no role)."""
    at: tuple[str, ...] = ()
    """The signature's frames, innermost first (functions of the script are `<script>:<name>`)."""

    def frames(self) -> tuple[str, ...]:
        stem = Path(self.script).stem
        return tuple(f if "." in f.split(":")[0] or f.startswith("torch") else f"{stem}:{f}" for f in self.at)


CORPUS = (
    Program("user_f2_thread_subclass.py", "F2", "request", (F2_AT, "run")),
    Program("user_f2_executor_result.py", "F2", "ThreadPoolExecutor", (F2_AT, "<genexpr>", "score_batches")),
    Program("user_f2_asyncio_to_thread.py", "F2", "asyncio", (F2_AT,)),
    Program("user_f2_logging_exception.py", "F2", "scorer", (F2_AT, "serve")),
    Program("user_f2_print_exc_header.py", "F2", "caller", (F2_AT, "call")),
    Program("user_f2_errors_list_reraise.py", "F2", "", (F2_AT, "call")),
    Program("user_f2_format_exc_json.py", "F2", "", (F2_AT, "serve")),
    Program("user_f2_chained.py", "F2", "Thread (serve)", (F2_AT, "serve")),
    Program("user_f2_exception_group.py", "F2", "", (F2_AT, "serve")),
    Program("user_f2_queue_pool.py", "F2", "Thread (worker)", (F2_AT, "worker")),
    Program("user_f2_propagating_thread.py", "F2", "", (F2_AT, "serve", "run")),
    Program("user_f2_then_segfault.py", "F2", "", (F2_AT, "main")),
    Program("user_r4_pool_map.py", "R4", "ThreadPoolExecutor", R4_AT),
    Program("user_r4_logging_default.py", "R4", "", R4_AT),
    Program("user_r4_daemon_excepthook.py", "R4", "server", R4_AT),
)


def _reference_keys(race: str) -> set[str]:
    return {crash_signature((FIXTURES / folder / "1.txt").read_text()).key for folder in REFERENCE[race]}


def _first_failure(script: str, tmp_path: Path) -> tuple[object, str]:
    for i in range(MAX_RUNS):
        spec = TrialSpec(
            trial_id=f"corpus/{script}/{i}",
            cell="corpus",
            timeout_s=180,
            hang_s=90,
            trial_index=i,
            cwd=str(ROOT),
            workload=WorkloadSpec(kind="command", argv=(sys.executable, str(SCRIPTS / script))),
        )
        result = run_trial(spec, tmp_path / str(i))
        if result.outcome.is_failure:
            return result, (tmp_path / str(i) / OUTPUT).read_text(errors="replace")
    pytest.fail(f"{script}: no failure in {MAX_RUNS} runs (last: {result.outcome.value}, {result.detail})")


def test_the_corpus_is_every_user_program():
    assert sorted([*(p.script for p in CORPUS), *STORED]) == sorted(p.name for p in SCRIPTS.glob("user_*.py"))
    assert len(CORPUS) + len(STORED) >= 15


@pytest.mark.parametrize("program", CORPUS, ids=lambda p: Path(p.script).stem)
def test_a_user_program_groups_with_its_race(program, tmp_path):
    result, output = _first_failure(program.script, tmp_path)
    sig = crash_signature(output, rc=result.rc)
    assert result.signature == sig.key, "the runner stored the signature of this output"
    assert sig.key in _reference_keys(program.race), sig.summary
    assert family(result.signature_summary) == program.race, result.signature_summary
    # And `harness diagnose` on that output names the race.
    (finding,) = diagnose.diagnose([diagnose.from_text(output, source=program.script, rc=result.rc)])
    assert finding.race == program.race, finding.verdict()
    if program.role is not None:
        assert (sig.role, sig.frames) == (program.role, program.frames()), sig.summary


def _family_runs() -> list[Path]:
    return sorted(p for p in FAMILY_RUNS.iterdir() if (p / "result.json").is_file())


@pytest.mark.parametrize("run", _family_runs(), ids=lambda p: p.name)
def test_a_native_crash_race_is_named_at_any_crash_site_of_its_family(run):
    """Stored runs of R5 (user_r5_cache_cleaner.py and repro r16) that crashed in different places:
    each is named R5 by `harness diagnose` on the run's folder, whichever site it crashed in."""
    findings = diagnose.diagnose(diagnose.collect([str(run)]))
    assert [f.race for f in findings] == [STORED["user_r5_cache_cleaner.py"]], [f.verdict() for f in findings]


@pytest.mark.parametrize("folder", R5_OUTPUTS)
def test_r5_outputs_are_named_by_their_family(folder):
    (finding,) = diagnose.diagnose([diagnose.from_text((FIXTURES / folder / "1.txt").read_text(), source=folder)])
    assert finding.race == "R5", finding.verdict()


def test_the_stored_family_runs_cover_several_crash_sites():
    """At least three places R5's program and repro died (two crash frames and a Python face): a
    family, not one frame."""
    sites = set()
    for run in _family_runs():
        record = json.loads((run / "result.json").read_text())
        sites.add(record["signature_summary"].split(" at ", 1)[-1].split(" < ")[0])
    assert {"torch._dynamo.eval_frame:compile_wrapper", "torch._dynamo.guards:invalidate"} <= sites
    assert len(sites) >= 3, sites


def test_stress_groups_a_programs_runs_under_one_signature(tmp_path):
    # `harness stress` groups failing runs by summary: three request threads that fail at once,
    # printed in any order (or interleaved), read as one failure, run after run.
    out = subprocess.run(
        stress_argv(2, tmp_path, cmd=(sys.executable, str(SCRIPTS / "user_f2_thread_subclass.py"))),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    groups = [line.strip() for line in out.stdout.splitlines() if line.startswith("  ") and " x " in line]
    assert out.returncode == 1 and groups == [
        f"2 x fx-trace-of-dynamo-fn (RuntimeError in request at {F2_AT} < user_f2_thread_subclass:run)"
    ], out.stdout
