"""harness diagnose: every committed failure and every real output fixture named by its catalogued
race; each input form (trial id, trial folder, stress folder, store, log, py-spy dump); bad input."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stress_cli import stress_args

from harness.diagnosis import catalogue as catalogue_module
from harness.diagnosis import diagnose, fix_advice, log_text
from harness.diagnosis.catalogue import RecordSource, load, major_minor
from harness.stores.discovery import default_stores
from harness.stores.store import TRIALS_NAME, Store

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "tracebacks"
MATCHED_AT_LEAST = 0.95

# Each fixture folder holds real outputs of one failure (tests/fixtures/tracebacks/README.md).
FIXTURE_RACES = {
    "f2_fx_trace_of_compiled_fn": "F2",
    "gpu_capture_not_permitted": "capture",
    "gpu_cgt_outputs_differ": "F1c",
    "gpu_cudagraph_overwritten": "F1c",
    "gpu_f11_legacy_ptr": "F11",
    "gpu_f1_backward": "F1",
    "gpu_f1_forward": "F1",
    "gpu_f1c_cublas_in_capture": "G1",
    "gpu_f1c_mempool_recording": "F1c",
    "gpu_f1c_warmup_parent": "F1c",
    "gpu_f1c_weakrefs_assert": "F1c",
    "gpu_f1c_weakrefs_assert_trainer": "F1c",
    "gpu_f9_checkpoint": "F9",
    "gpu_hang_flex_backward_compile": "G2",
    "gpu_mix_order_shape": "mix-order",
    "gpu_mix_order_then_segv_gc": "mix-order",
    "r4_eager_module_nameerror": "R4",
    "r5_reset_fpe": "R5",
    "r5_reset_segfault": "R5",
    "r5_reset_segfault_after_nameerror": "R5",
    "r5_reset_typeerror_then_segfault": "R5",
    # Generic: a native crash or a hang with nothing that names a race (no stash in the output,
    # a deadlock of the program's own locks) is "unknown", never a guess.
    "gpu_segv_during_gc": None,
    "hang_compile_lock_held": None,
    "hang_two_lock_deadlock": None,
}


def _fixture_files():
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for f in sorted(folder.iterdir()):
            if f.suffix in (".txt", ".json"):
                yield folder.name, f


@pytest.mark.parametrize("folder, path", list(_fixture_files()), ids=lambda x: getattr(x, "name", x))
def test_every_real_output_fixture_is_named_by_its_race(folder, path):
    if folder not in FIXTURE_RACES:
        pytest.skip(f"{folder}: not a failure (out of memory is RESOURCE, not a race)")
    failure = diagnose.from_text(path.read_text(), source=str(path))
    assert failure is not None
    (finding,) = diagnose.diagnose([failure])
    assert finding.race == FIXTURE_RACES[folder], finding.verdict()


def test_every_fixture_folder_has_an_expected_race_or_a_reason():
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders - set(FIXTURE_RACES) == {"gpu_oom_cublas_then_segv_gc", "gpu_oom_then_segv_gc"}


def committed_stores() -> list[Path]:
    """The stores under results/ whose trials.jsonl git tracks: a user's own runs (runs/, where
    `python -m harness matrix` writes, or a new store under results/) never move a count here.
    Without a git checkout, results/ as shipped."""
    stores = default_stores(ROOT / "results")
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "results"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return stores
    tracked = {ROOT / p for p in listed.split("\0") if p}
    return [s for s in stores if s / TRIALS_NAME in tracked] if tracked else stores


def _stored_failures():
    out = []
    for store_dir in committed_stores():
        store = Store(store_dir)
        for r in store.load():
            if r.replay_of is None and r.outcome.is_failure and r.outcome.counts_as_trial:
                # Stores of one matrix on several torches share trial ids: the run is the store's.
                failure = diagnose.from_record(r, store.artefacts_of(r))
                failure.run = f"{store_dir.name}:{r.trial_id}"
                out.append((store_dir.name, r, failure))
    return out


def test_committed_stores_failures_are_matched_to_their_race():
    """At least 95% of the failing trials of every committed store are named by a catalogued race;
    the rest are listed. A repro's raw failures on the torch its suite row was measured on are named
    by one of the repro's own races, or by a race the row accepts (r04's shared tree fails in F1c's
    and capture's faces). On other torches a repro may die of another race first (torch 2.11's CUDA
    build without a GPU: fake-guard-exit in r08, r11, r17 and r25; F1 in r26), which the versions
    table shows beside its own count."""
    rows = {r.id: r for r in load().repros if r.on_torch is None}
    stored = _stored_failures()
    findings = diagnose.diagnose([f for _, _, f in stored])
    by_source = {s: f for f in findings for s in f.sources}
    unmatched = [(name, r.trial_id, r.signature_summary) for name, r, f in stored if by_source[f.run_id].race is None]
    share = 1 - len(unmatched) / len(stored)
    print(f"{len(stored) - len(unmatched)} of {len(stored)} failing trials matched ({100 * share:.1f}%); unmatched:")
    for line in collections.Counter((n, s) for n, _, s in unmatched).most_common():
        print(f"  {line[1]} x {line[0][0]}: {line[0][1]}")
    assert share >= MATCHED_AT_LEAST  # REPORT.md's count of these: tests/test_report_claims.py
    wrong = []
    catalogue = load()
    for _name, r, f in stored:
        rid, _, rest = r.cell.partition(":")
        race = by_source[f.run_id].race
        if rid not in rows or not rest.startswith("raw@") or race is None:
            continue
        if major_minor(r.torch_version or rows[rid].torch) != major_minor(rows[rid].torch):
            continue
        accepted = {x.id for x in catalogue.races_of_repro(rid)}
        accepted |= {x.id for x in catalogue.races if x.pattern and x.pattern in rows[rid].family}
        if race not in accepted:
            wrong.append((r.trial_id, race, sorted(accepted)))
    assert not wrong


def test_a_matched_race_agrees_with_the_family_tables():
    from harness.diagnosis import families

    for _, r, failure in _stored_failures()[:400]:
        (finding,) = diagnose.diagnose([failure])
        fam = families.family(r.signature_summary)
        if finding.race is not None and not finding.matches[0].suspected:
            assert finding.race == fam


def test_fix_counts_come_from_the_store_now(tmp_path):
    """A fix's k/n is read from its store when asked: a store copy with one more failing fix trial
    says so (the catalogue holds no number)."""
    src = ROOT / "results" / "catalogue-cpu" / "trials.jsonl"
    (tmp_path / "results" / "catalogue-cpu").mkdir(parents=True)
    lines = src.read_text().splitlines()
    fixed = next(json.loads(x) for x in lines if json.loads(x)["cell"] == "r16:global-lock@reset-pressure")
    fixed.update(
        trial_id="catalogue-cpu/r16:global-lock@reset-pressure/99",
        outcome="abort",
        signature_summary="Segmentation fault at torch._dynamo.eval_frame:compile_wrapper",
    )
    (tmp_path / "results" / "catalogue-cpu" / "trials.jsonl").write_text("\n".join([*lines, json.dumps(fixed)]) + "\n")
    r5 = load().race("R5")
    before = diagnose.fix_lines(r5, "2.13.0+cpu", RecordSource())
    after = diagnose.fix_lines(r5, "2.13.0+cpu", RecordSource(tmp_path))
    assert (before[0].count.k, before[0].count.n) == (0, 29) and before[0].held()
    assert (after[0].count.k, after[0].count.n) == (1, 30) and not after[0].held()


def test_a_generic_crash_is_suspected_only_with_its_context_and_torch():
    seg = dict(outcome="ABORT", key="Segmentation-fault-x", summary="Segmentation fault: during garbage collection")
    with_stash = diagnose.Failure(source="a", torch="2.11.0", fixes=("cstash-tls-init",), **seg)
    no_stash = diagnose.Failure(source="b", torch="2.11.0", fixes=("graph-isolation",), **seg)
    on_213 = diagnose.Failure(source="c", torch="2.13.0+cpu", fixes=("cstash-tls-init",), **seg)
    found = {f.sources[0]: f for x in (with_stash, no_stash, on_213) for f in diagnose.diagnose([x])}
    assert found["a"].race == "stash-refcount" and found["a"].matches[0].suspected
    assert found["a"].verdict().startswith("suspected: stash-refcount")
    assert found["b"].race is None and found["b"].verdict().startswith("unknown")
    assert found["c"].race is None  # 2.13's stash keeps its reference: r22 0/20 there


def test_an_unknown_failure_says_possibly_new():
    text = 'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n    f()\nValueError: nope\n'
    failure = diagnose.from_text(text, source="x.log")
    (finding,) = diagnose.diagnose([failure])
    assert finding.race is None and finding.verdict() == "unknown: no catalogued race matches (possibly new)"


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_cli_on_a_trial_id_a_log_file_and_json():
    p = _cli("diagnose", "gpu-repros/r01:raw@-/0", str(FIXTURES / "r5_reset_segfault" / "1.txt"))
    assert p.returncode == 0, p.stderr
    assert "known: F1 (CUDAGraph Trees TLS" in p.stdout and "cstash-tls-init+global-lock: held, 0/58" in p.stdout
    assert "known: R5" in p.stdout and "global-lock: held, 0/29 (torch 2.13" in p.stdout
    assert (
        "python -m harness stress -p 2 --max-runs 10 --plan reset-pressure -- python repro/r16_reset_segfault.py"
        in p.stdout
    )
    j = _cli("diagnose", "--json", "gpu-repros/r22:raw@-/0")
    (finding,) = json.loads(j.stdout)["findings"]
    assert finding["race"] == "stash-refcount" and finding["fixes"][0]["held"] is True
    assert any(v.startswith("torch 2.13: not reproduced 0/20") for v in finding["versions"])


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (["diagnose", str(tmp_path / "missing")], ["diagnose", str(tmp_path)]):
        p = _cli(*args)
        assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr


def test_a_stress_folder_and_a_trial_folder(tmp_path):
    """A real run through the runner: a program that deadlocks on its own locks (no torch) is a
    HANG, diagnosed as a generic hang: no catalogued race, said so."""
    out = tmp_path / "stress"
    deadlock = (sys.executable, str(ROOT / "tests" / "scripts" / "deadlock.py"))
    p = _cli(*stress_args(1, out, "--timeout", "60", "--hang", "3", cmd=deadlock, parallel=1))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "diagnosis: 0 of 1 failing runs matched a catalogued race" in p.stdout
    assert "a hang of the program's own code, not a torch race" in p.stdout
    assert "a deadlock in the program's own locks" in p.stdout
    d = _cli("diagnose", str(out / "0"))
    assert d.returncode == 0 and "1 run HANG: hang:" in d.stdout, d.stdout + d.stderr


@pytest.mark.skipif(
    shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists(), reason="needs py-spy"
)
def test_a_pyspy_text_dump_is_a_hang_with_its_threads(tmp_path):
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "scripts" / "deadlock.py")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.5)
        dump = subprocess.run([pyspy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=30)
        if dump.returncode != 0:
            pytest.skip(f"py-spy cannot attach here: {dump.stderr.strip()[:200]}")
    finally:
        proc.kill()
        proc.wait()
    failure = diagnose.from_text(dump.stdout, source="dump.txt")
    assert failure is not None and failure.outcome == "HANG"
    assert failure.summary.startswith("hang: ") and "MainThread@" in failure.summary


def test_the_trainers_own_stall_dump_from_the_h200_is_g2():
    """`dflash train --preset gpu-default --set fixes=none` on one H200 (torch 2.11, cold Inductor
    cache, 2026-12-02) stalled before its first step; its watchdog's py-spy dump (text, --native)
    holds the autograd device thread in compile_fx_backward, nameless, told by its native frames."""
    dump = ROOT / "results" / "h200-2026-12-02" / "raw-stall-dump.txt"
    failure = diagnose.from_text(dump.read_text(), source=str(dump), torch="2.11.0+cu130")
    assert (
        failure.outcome == "HANG"
        and "autograd-device@torch._inductor.compile_fx:compile_fx_backward" in failure.summary
    )
    (finding,) = diagnose.diagnose([failure])
    assert finding.race == "G2"
    held = {f.name for f in finding.fixes if f.same_torch and f.held()}
    assert {"global-lock", "single-thread-autograd"} <= held


def test_a_bench_killed_while_autotuning_is_called_slow_not_hung():
    """`harness price` on the H200 (torch 2.11, launch-bound, CUDA graphs, `global-lock`): the first
    bench on a cold Inductor cache passed its 150 s limit and was dumped before the kill. One drafter
    thread ran Inductor's autotuning under the lock, the others waited on it: busy, not a deadlock."""
    for name in ("hang_dump.txt", "pyspy.json"):
        dump = ROOT / "results" / "h200-campaign" / "logs" / "run58-price-dump" / name
        (finding,) = diagnose.diagnose(
            [*diagnose.failures_in_text(dump.read_text(), source=str(dump), torch="2.11.0+cu130")]
        )
        assert finding.outcome == "HANG" and finding.race is None
        verdict = finding.verdict()
        assert verdict.startswith("probably slow, not hung"), verdict
        assert "dflash-train-1 autotuning Inductor kernels" in verdict and "other thread(s) wait" in verdict


def test_one_dump_with_no_thread_running_stays_a_hang():
    from harness.trial import blocking
    from harness.trial.hangs import Frame, ThreadStack

    def stack(name, status, *frames):
        return ThreadStack(
            name=name, thread_id="1", status=status, frames=tuple(Frame(name=f, filename=p, line=1) for f, p in frames)
        )

    waiting = stack("worker-1", "idle", ("acquire", "/usr/lib/python3.12/threading.py"), ("step", "/app/train.py"))
    compiling = stack(
        "worker-0",
        "active+gil",
        ("codegen", "/v/lib/python3.12/site-packages/torch/_inductor/graph.py"),
        ("compile", "/v/lib/python3.12/site-packages/torch/_dynamo/convert_frame.py"),
        ("step", "/app/train.py"),
    )
    busy = blocking.classify((waiting, compiling), one_dump=True)
    assert busy.kind == blocking.BUSY_IN_TORCH and "worker-0 compiling a graph with Inductor" in busy.text()
    # The runner's hangs were idle twice: a thread it saw `active` is not enough to call them busy.
    assert blocking.classify((waiting, compiling)).kind == blocking.TORCH_WAIT
    idle = stack("worker-0", "idle", *[(f.name, f.filename) for f in compiling.frames])
    assert blocking.classify((waiting, idle), one_dump=True).kind == blocking.TORCH_WAIT


def test_a_log_names_its_own_torch():
    text = "STALLED: ...\ntorch 2.11.0+cu130, Python 3.12.3\nthreads (...):\n"
    assert log_text.torch_in(text) == "2.11.0+cu130"
    assert log_text.torch_in('{"event": "failed", "torch": "2.11.0+cu130"}') == "2.11.0+cu130"
    assert log_text.torch_in("no version here") is None


# ------------------------------------------------------------------ every race of a run, honestly

FAMILIES = ROOT / "tests" / "fixtures" / "race_families"


def _by_race(findings) -> dict:
    return {f.race: f for f in findings if f.race is not None}


def test_every_race_of_a_run_is_named_once_from_every_thread_and_source():
    """dict_mutation_beside_f2: two scorers die of F2, the live scorer of dict-mutation, in the same
    runs. Run 0's record lists both; run 1's lists F2 only (an older runner), its dict-mutation face
    only in thread_errors.jsonl and the output. Each race is named once a run, and the KeyError faces
    are dict-mutation's, not F2's (whose message is elsewhere in the same output)."""
    folder = FAMILIES / "dict_mutation_beside_f2"
    findings = diagnose.diagnose(diagnose.collect([str(folder)]))
    races = _by_race(findings)
    assert set(races) == {"F2", "dict-mutation"}, [f.verdict() for f in findings]
    for race in races.values():
        assert race.runs == 2 and len(set(race.sources)) == 2
    assert all(f.race is not None for f in findings), [f.verdict() for f in findings]
    assert "KeyError" in races["dict-mutation"].summary and "KeyError" not in races["F2"].summary
    line = diagnose.summary_line(findings)
    assert "2 of 2 failing runs" in line and "F2 in 2 runs" in line and "dict-mutation in 2 runs" in line, line
    # The output alone (a pasted log) shows both as well.
    log = diagnose.diagnose(diagnose.collect([str(folder / "1" / "output.txt")]))
    assert set(_by_race(log)) == {"F2", "dict-mutation"}


@pytest.mark.parametrize(
    "summary",
    [
        "torch._dynamo.exc.InternalTorchDynamoError in scorer-live at <string>:<module> < torch._guards:get_value"
        " < torch._dynamo.guards:get: KeyError: session_3",
        "KeyError in ? at <string>:<module> < torch._guards:get_value < torch._dynamo.guards:get: 'session_3'",
        "RuntimeError in scorer-live at shape:score < shape:scorer_loop: dictionary keys changed during iteration",
        "torch._dynamo.exc.InternalTorchDynamoError in repro-caller at torch._dynamo.variables.builder:<genexpr>:"
        " RuntimeError: dictionary keys changed during iteration",
        "torch._dynamo.exc.InternalTorchDynamoError in repro-caller at x:y: RuntimeError: OrderedDict mutated during"
        " iteration",
        "RuntimeError in scorer at x:y: dictionary changed size during iteration",
    ],
)
def test_dict_mutation_is_named_by_each_of_its_faces(summary):
    from harness.diagnosis import families

    assert families.family(summary) == "dict-mutation"


def test_a_fix_is_offered_only_where_it_holds_on_the_program_as_it_is():
    """dict-mutation's global-lock held in r27 only because r27's mutator takes the lock; the
    unmodified corpus program fails 3/3 under it. So no `--fix` is offered: the program must
    change, in the catalogue's words. F2's fixes reach an unedited program and are offered."""
    findings = _by_race(diagnose.diagnose(diagnose.collect([str(FAMILIES / "dict_mutation_beside_f2")])))
    dm, f2 = findings["dict-mutation"], findings["F2"]
    assert dm.try_fixes == "" and "global-lock" not in dm.try_fixes
    assert "around each mutation" in dm.change and "pass a copy" in dm.change, dm.change
    assert "--fix nested-fx-fallback" in f2.try_fixes and not f2.change
    brief = diagnose.render([dm], brief=True)
    assert "try on your program" not in brief and "change it:" in brief, brief
    assert "global-lock (with an edit of the program)" in brief, brief
    # The rule itself: a fix measured with an edit, or one that leaves the face shown, is not offered.
    held = catalogue_module.Count(k=0, n=10, failed=0, torch=("2.13.0",))
    line = diagnose.FixLine(name="global-lock", where="w", torch="2.13", count=held, same_torch=True)
    assert "--fix global-lock" in diagnose.try_fixes_command([line], ())
    for changed in ({"edit": "the mutator takes the lock"}, {"leaves": "hit config.recompile_limit"}):
        assert diagnose.try_fixes_command([dataclasses.replace(line, **changed)], ()) == ""


def test_the_fix_with_the_best_evidence_is_offered_first():
    """On this torch, held, then the lowest rate of failures of any kind, then the most trials."""

    def line(name, k, n, failed, same=True):
        c = catalogue_module.Count(k=k, n=n, failed=failed, torch=("2.13.0",))
        return diagnose.FixLine(name=name, where="w", torch="2.13", count=c, same_torch=same)

    lines = [
        line("cublas-handle-init", 0, 10, 0, same=False),
        line("stream-sync", 2, 10, 2),
        line("global-lock", 0, 10, 0),
        line("cstash-tls-init", 0, 20, 3),
        line("nested-fx-fallback", 0, 29, 0),
    ]
    order = [x.name for x in sorted(lines, key=diagnose.FixLine.rank)]
    assert order == ["nested-fx-fallback", "global-lock", "cstash-tls-init", "stream-sync", "cublas-handle-init"]
    assert diagnose.try_fixes_command(lines, (), limit=1).split("--fix ")[2].startswith("nested-fx-fallback")


F2_SUMMARY = "fx-trace-of-dynamo-fn (RuntimeError in MainThread at torch._dynamo.eval_frame:compile_wrapper < m:main)"
F2_TEXT = (
    'Traceback (most recent call last):\n  File "m.py", line 9, in main\n    f(x)\n'
    "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function. "
    "This is not supported at the moment.\n"
)


def _f2_failure(**kw) -> diagnose.Failure:
    return diagnose.Failure(
        source="run", outcome="CRASH", key="fx-trace-of-dynamo-fn-1", summary=F2_SUMMARY, text=F2_TEXT, **kw
    )


def test_one_thread_is_not_a_race():
    """F2's message from a program that started no thread (FX-tracing a module whose submodule was
    compiled): its own failure, no thread-safety fix; unknown threads or a second thread keep F2."""
    (alone,) = diagnose.diagnose([_f2_failure(threads_started=0, threads=("MainThread",))])
    assert alone.race is None and not alone.fixes and not alone.try_fixes
    assert alone.verdict().startswith("your program fails this way on its own (one thread)"), alone.verdict()
    for kw in ({}, {"threads_started": 2}, {"threads_started": 0, "threads": ("worker-1",)}):
        (finding,) = diagnose.diagnose([_f2_failure(**kw)])
        assert finding.race == "F2", (kw, finding.verdict())
    (shut,) = diagnose.diagnose([_f2_failure(exposures={"F2": 0, "R4": 3})])
    assert shut.race is None and "window (fx-flag-overlap) was measured and never opened" in shut.verdict()
    (opened,) = diagnose.diagnose([_f2_failure(exposures={"F2": 5})])
    assert opened.race == "F2"
    # The real run (threads_started 0 from a runner that records it; F2's window at 0 in any case).
    (real,) = diagnose.diagnose(diagnose.collect([str(FAMILIES / "f2_one_thread")]))
    assert real.race is None and real.verdict().startswith("your program fails this way on its own"), real.verdict()


def test_a_deterministic_failure_is_never_called_possibly_new():
    text = 'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n    f()\nValueError: nope\n'
    findings = diagnose.diagnose([diagnose.from_text(text, source="x.log")])
    why = "each of the first 3 runs failed the same way within 2.0 s"
    for brief in (True, False):
        out = diagnose.render(findings, brief=brief, deterministic=why)
        assert f"deterministic: {why}" in out and "possibly new" not in out, out
    assert "possibly new" in diagnose.render(findings)


def _ok_run(text: str, **kw) -> diagnose.Failure:
    return diagnose.Failure(source="ok", outcome="OK", key=None, summary=None, text=text, detail="exit 0", **kw)


def test_the_default_recompile_limit_alone_is_a_note_not_f14():
    limit_8 = "W1202 torch/_dynamo/convert_frame.py:1050] torch._dynamo hit config.recompile_limit (8)\n"
    (note,) = diagnose.diagnose([_ok_run(limit_8)])
    assert note.race is None and note.verdict() == "note: recompile limit hit (not a race by itself)"
    assert diagnose.faces(limit_8) == []
    # A thread that set the limit (another thread hit a raised one, or the bootstrap's record of the
    # configs the program set): F14, and its fix that only sets error_on_nested_fx_trace not offered.
    limit_64 = limit_8.replace("(8)", "(64)")
    set_64 = "MainThread: torch._dynamo.config.recompile_limit=64"
    for failure in (_ok_run(limit_8 + limit_64), _ok_run(limit_8, config_threads=set_64)):
        (f14,) = diagnose.diagnose([failure])
        assert f14.race == "F14" and not f14.matches[0].suspected, f14.verdict()
        assert "nested-fx-fallback" not in f14.try_fixes and "set it in each thread" in f14.change, f14.change
    assert diagnose.faces(limit_8, config=set_64) == ["F14 (config set in one thread invisible to others (R9))"]
    # Set to the default itself, or another config: the line alone again.
    for other in (set_64.replace("=64", "=8"), "MainThread: torch._dynamo.config.cache_size_limit_x=64"):
        assert diagnose.faces(limit_8, config=other) == [], other


def test_a_race_whose_faces_come_with_the_window_shut_is_not_cleared_by_it():
    """F1c failed with its window measured shut on the H200 (serialised calls, outputs read outside
    the lock): a shut window names it still, where F2's clears F2."""
    text = "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run.\n"
    failure = diagnose.Failure(
        source="run", outcome="CRASH", key="k", summary="cudagraphs-output-overwritten (RuntimeError in gpu-worker at w:worker)",
        text=text, threads_started=4, exposures={"F1c": 0},
    )  # fmt: skip
    (finding,) = diagnose.diagnose([failure])
    assert finding.race == "F1c", finding.verdict()
    assert not load().race("F1c").window_clears and load().race("F2").window_clears


def test_an_offered_fix_carries_the_fix_it_needs_beside_it():
    """cstash-tls-init exposes stash-refcount (its `context`) on torch 2.11, where stash-incref held:
    every offered set with it carries stash-incref (the H200's F1 set without it segfaulted 1 of 4)."""
    text = (
        "Exception in thread gpu-request:\nTraceback (most recent call last):\n"
        '  File "/x/torch/_inductor/cudagraph_trees.py", line 1, in get_obj\n'
        "    assert torch._C._is_key_in_tls(attr_name)\nAssertionError\n"
    )
    failure = diagnose.Failure(
        source="run", outcome="CRASH", key="k", text=text, threads_started=3, torch="2.11.0",
        summary="AssertionError in gpu-request at torch._inductor.cudagraph_trees:get_obj",
    )  # fmt: skip
    (finding,) = diagnose.diagnose([failure])
    assert finding.race == "F1", finding.verdict()
    offered = re.findall(r"--fix (\S+)", finding.try_fixes)
    with_stash = [s for s in offered if "cstash-tls-init" in s.split(",")]
    assert with_stash and all("stash-incref" in s.split(",") for s in with_stash), finding.try_fixes
    assert fix_advice.companions(load(), RecordSource())["cstash-tls-init"] == ("stash-incref",)


def test_a_gpu_gate_run_kept_by_stress_is_named_where_it_ran():
    # The clean control's one failure (H100, torch 2.11): a call under another thread's make_fx trace.
    run = ROOT / "results" / "gpu-gate" / "2026-12-06-h100" / "gpu_default_mode_threads-run"
    j = _cli("diagnose", "--json", str(run))
    assert j.returncode == 0, j.stderr
    (finding,) = json.loads(j.stdout)["findings"]
    assert finding["race"] == "F2" and finding["outcome"] == "CRASH"
    assert any(f["name"] == "global-lock" for f in finding["fixes"])
