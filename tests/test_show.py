"""harness show: one stored trial made readable from the store alone."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from records import record

from harness.cli import main
from harness.stores.store import Store
from harness.trial.outcome import Outcome
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPTS = Path(__file__).parent / "scripts"


def test_show_a_crash_gives_family_first_failure_and_the_commands(tmp_path, capsys):
    store = Store(tmp_path / "m")
    tid = "m/w:raw@-/0"
    art = store.artefacts_dir(tid)
    spec = TrialSpec(
        trial_id=tid,
        cell="w:raw@-",
        workload=WorkloadSpec(kind="command", argv=(sys.executable, str(SCRIPTS / "needs_one_rule.py"))),
        plan={
            "seed": 2,
            "profile": "custom",
            "rules": [{"point": "drafter.before_forward", "action": "raise", "params": {"message": "injected"}}],
        },
        timeout_s=60,
        hang_s=30,
    )
    store.append(run_trial(spec, art))
    assert main(["show", tid, "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tid}: CRASH")
    assert "fixes: as is; plan: custom seed 2, 1 rules" in out  # a command spec with no fixes runs as it is
    assert "family other: no known family" in out
    assert "switch interval default" in out
    # The script re-raises the worker's exception in its main thread: that traceback is the failure,
    # raised in a thread the output does not name (`raise errors[0]`; signature v7), not MainThread.
    assert "first failure, thread ? (innermost first):" in out
    assert "needs_one_rule.py:12 in step" in out and "InjectedFault: injected" in out
    assert f"python -m harness replay {tid} --store {store.root} -n 10" in out
    assert f"python -m harness shrink {tid} --store {store.root} -n 5" in out


def test_show_a_native_crash_and_a_hang_from_kept_artefacts(tmp_path, capsys):
    store = Store(tmp_path / "m")
    for i, (outcome, files) in enumerate(
        [
            (Outcome.ABORT, {"output.txt": FIXTURES / "tracebacks" / "r5_reset_fpe" / "1.txt"}),
            (Outcome.HANG, {"pyspy.json": FIXTURES / "tracebacks" / "gpu_hang_flex_backward_compile" / "1.pyspy.json"}),
        ]
    ):
        art = store.artefacts_dir(f"m/w:raw@-/{i}")
        for name, src in files.items():
            shutil.copy(src, art / name)
        if outcome is Outcome.ABORT:
            (art / "native_stack.txt").write_text(
                "# h: 2 frames\nlibtorch_python.so(+0x1) std::x::operator[]\n"
                "libtorch_python.so(+0x2) create_cache_entry\n"
            )
        store.append(
            record(
                f"m/w:raw@-/{i}",
                outcome=outcome,
                signature="k",
                signature_summary="hang: x"
                if i
                else "Floating point exception at torch._dynamo.eval_frame:compile_wrapper",
                signature_version=5,
                artefacts=str(art),
                gpu_mem_gib=21.37 if i else None,
            )
        )
    assert main(["show", "m/w:raw@-/0", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "family R5: torch._dynamo.reset() while another thread runs compiled code" in out
    assert "native crash site: create_cache_entry" in out
    assert "artefacts: not kept" not in out and "rerun it" not in out  # no spec.json, no matrix spec
    assert main(["show", "m/w:raw@-/1", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "hang dump (py-spy;" in out and "compile_fx_backward" in out
    assert "held 21.4 GiB on a GPU (nvidia-smi's samples)" in out  # a hang reports nothing itself


def test_show_gives_both_memory_figures_where_a_trial_has_both(tmp_path, capsys):
    store = Store(tmp_path / "m")
    for i, (sampled, final) in enumerate(
        [(20.6, {"gpu_mem_peak_gib": {"cuda:0": 19.7, "cuda:1": 3.0}}), (None, {"gpu_mem_peak_gib": {"cuda:0": 19.7}})]
    ):
        store.append(
            record(
                f"m/w:raw@-/{i}",
                gpu_mem_gib=sampled,
                final=final,
            )
        )
    assert main(["show", "m/w:raw@-/0", "--store", str(store.root)]) == 0
    assert "held 20.6 GiB on a GPU (nvidia-smi's samples; its allocator's peak 19.7 GiB)" in capsys.readouterr().out
    assert main(["show", "m/w:raw@-/1", "--store", str(store.root)]) == 0
    assert "held 19.7 GiB on a GPU (its allocator's peak)" in capsys.readouterr().out


def test_show_an_unknown_trial_is_one_error_line_and_exit_2(tmp_path, capsys):
    assert main(["show", "nope/x:raw@-/0", "--store", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: trial 'nope/x:raw@-/0' not found")


def test_a_trial_not_found_names_three_stores_and_counts_the_rest(tmp_path):
    from harness.stores.discovery import TrialNotFound, find_trial

    stores = [tmp_path / f"s{i}" for i in range(5)]
    with pytest.raises(TrialNotFound) as e:
        find_trial("nope/0", stores)
    msg = str(e.value)
    assert msg == f"trial 'nope/0' not found in 5 stores ({stores[0]}, {stores[1]}, {stores[2]} and 2 more)"
    with pytest.raises(TrialNotFound, match="not found in no stores"):
        find_trial("nope/0", [])
