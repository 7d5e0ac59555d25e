"""harness.trial.native: the preloaded handler prints a crashing thread's native frames, the runner
names them where the libraries are, and a crash's outcome and signature stay what they were."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from matrix_specs import command, spec_dict, write_spec
from records import record
from stress_cli import stress_args

from harness.analysis import excerpts
from harness.stores.store import Store
from harness.trial import native, signature
from harness.trial.folder import NATIVE_STACK
from harness.trial.outcome import Outcome
from harness.trial.runner import child_env, run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

FIXTURE = Path(__file__).parent / "fixtures" / "native" / "r16_reset_segfault.txt"
SCRIPTS = Path(__file__).parent / "scripts"
needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

# A finaliser that reads address 0 while the collector runs: the face of the H200 campaign's
# "Segmentation fault: during garbage collection" trials.
GC_SEGFAULT = """
import ctypes, gc
class Finalised:
    def __del__(self):
        ctypes.string_at(0)
a, b = Finalised(), Finalised()
a.other, b.other = b, a
del a, b
gc.collect()
"""


def test_native_stack_drops_the_handler_and_both_signal_deliveries():
    # A real R5 crash (r16 on torch 2.13 CPU): handler, trampoline, pthread_kill, raise (by
    # faulthandler), trampoline, then the faulting code.
    frames = native.native_stack(FIXTURE.read_text())
    assert [str(f) for f in frames[:3]] == [
        "libtorch_python.so(+0x89a516)",
        "libtorch_python.so(+0x898c95)",
        "libtorch_python.so(+0x893c84)",
    ]
    assert not any("segv_stack" in f.obj or "gsignal" in f.symbol for f in frames)
    assert native.native_stack("Fatal Python error: Segmentation fault\n") is None


@needs_cc
def test_a_segfault_in_a_finaliser_prints_its_native_frames_and_keeps_its_signal_and_signature(tmp_path):
    base = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    plain = subprocess.run([sys.executable, "-c", GC_SEGFAULT], env=base, capture_output=True, text=True)
    traced = subprocess.run(
        [sys.executable, "-c", GC_SEGFAULT], env=native.with_preload(base), capture_output=True, text=True
    )
    assert plain.returncode == traced.returncode == -signal.SIGSEGV
    assert native.native_stack(plain.stderr) is None
    frames = native.resolve(native.native_stack(traced.stderr))
    assert frames and "Garbage-collecting" in traced.stderr  # faulthandler still speaks first
    named = " ".join(f.name or f.symbol for f in frames)
    assert "ffi_call" in named or "_ctypes" in " ".join(f.obj for f in frames)
    if shutil.which("addr2line"):
        assert "collect" in named.lower()  # the collector's own frames
    key = lambda text: signature.crash_signature(text, rc=-signal.SIGSEGV).key  # noqa: E731
    assert key(traced.stderr) == key(plain.stderr)
    assert "during garbage collection" in signature.crash_signature(traced.stderr).summary


def _script_trial(name: str, script: str) -> TrialSpec:
    """A trial `name` (its own cell) that runs tests/scripts/`script` (30 s timeout, hang at 10 s)."""
    return TrialSpec(
        trial_id=name,
        cell=name,
        timeout_s=30,
        hang_s=10,
        workload=WorkloadSpec(kind="command", argv=(sys.executable, str(SCRIPTS / script))),
    )


@needs_cc
def test_the_runner_keeps_the_resolved_native_stack_of_a_crashed_trial(tmp_path):
    result = run_trial(_script_trial("segv", "segfault.py"), tmp_path / "a")
    assert result.outcome is Outcome.ABORT and result.signature_summary == "Segmentation fault at ctypes:string_at"
    kept = (tmp_path / "a" / NATIVE_STACK).read_text().splitlines()
    assert kept[0].startswith("# ") and "frames, innermost first" in kept[0]
    assert any("_ctypes" in line or "ffi" in line for line in kept[1:])
    ok = run_trial(_script_trial("ok", "ok.py"), tmp_path / "b")
    assert ok.outcome is Outcome.OK and not (tmp_path / "b" / NATIVE_STACK).exists()


def test_switched_off_or_without_a_compiler_trials_run_without_the_handler(tmp_path, monkeypatch):
    spec = TrialSpec(trial_id="x", cell="x", workload=WorkloadSpec(kind="command", argv=("true",)))
    monkeypatch.setenv("LD_PRELOAD", "libmine.so")
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert child_env(spec, tmp_path)["LD_PRELOAD"] == "libmine.so"
    assert native.why_not() == "HARNESS_NATIVE_STACKS=0"
    monkeypatch.delenv(native.ENV_SWITCH)
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setattr(native, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(native, "compiler", lambda: None)
    assert native.preload() is None and "no C compiler" in native.why_not()
    assert child_env(spec, tmp_path)["LD_PRELOAD"] == "libmine.so"


@needs_cc
def test_the_library_goes_first_on_ld_preload_and_is_built_once(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setattr(native, "cache_dir", lambda: tmp_path / "cache")
    lib = native.preload()
    assert lib is not None and lib.parent == tmp_path / "cache" and native.why_not() is None
    assert sorted(p.name for p in lib.parent.iterdir()) == [lib.name]  # no temporary file left
    env = native.with_preload({"LD_PRELOAD": "libmine.so"})
    assert env["LD_PRELOAD"] == f"{lib} libmine.so"
    monkeypatch.setattr(native, "_built", {})
    mtime = lib.stat().st_mtime_ns
    assert native.preload() == lib and lib.stat().st_mtime_ns == mtime  # found, not rebuilt


def test_the_crash_site_skips_runtime_frames_and_std_templates_and_survives_the_kept_file():
    frames = [
        native.NativeFrame(
            obj="/x/libtorch_python.so",
            symbol="+0x1",
            name="std::__detail::_Map_base<long, std::pair<long const, int> >::operator[](long const&)",
        ),
        native.NativeFrame(obj="/x/libtorch_python.so", symbol="+0x2", name="create_cache_entry"),
        native.NativeFrame(obj="/x/libtorch_python.so", symbol="+0x3", name="dynamo__custom_eval_frame"),
    ]
    assert native.crash_site(frames) == "create_cache_entry"
    kept = native.read_kept("# host: 3 frames\n" + native.render(frames, width=None) + "\n")
    assert kept == [dataclasses.replace(f, obj=os.path.basename(f.obj)) for f in frames]
    libc = [
        native.NativeFrame(obj="libc.so.6", symbol="+0x9", name="__memmove_avx_unaligned_erms"),
        native.NativeFrame(obj="libpython3.12.so.1.0", symbol="+0x8", name="gc_collect_main"),
    ]
    assert native.crash_site(libc) == "libc.so.6(+0x9) __memmove_avx_unaligned_erms"  # nothing else named
    assert native.crash_site([]) == "?"


def test_the_report_groups_a_signatures_native_stacks_by_crash_site(tmp_path):
    store = Store(tmp_path / "m")
    records = []
    fixture = native.native_stack(FIXTURE.read_text())
    named = [dataclasses.replace(fixture[1], name="create_cache_entry"), *fixture[2:]]
    other = [native.NativeFrame(obj="libtorch_cuda.so", symbol="+0x5", name="c10::cuda::free_block")]
    for i, frames in enumerate((named, other, named)):
        r = record(
            f"m/w:raw@-/{i}",
            Outcome.ABORT,
            signature="segv-1",
            signature_summary="Segmentation fault: during garbage collection",
            artefacts=f"/elsewhere/artefacts/t{i}",
        )
        folder = store.root / "artefacts" / f"t{i}"
        folder.mkdir(parents=True)
        (folder / NATIVE_STACK).write_text("# host: frames\n" + native.render(frames, width=None) + "\n")
        records.append(r)
    first, second = excerpts.native_excerpts(records, store.root)
    assert (first.site, first.trials, first.of, first.trial_id) == ("create_cache_entry", 2, 3, "m/w:raw@-/0")
    assert (second.site, second.trials, second.trial_id) == ("c10::cuda::free_block", 1, "m/w:raw@-/1")
    lines = first.text.splitlines()
    assert lines[0] == "libtorch_python.so(+0x898c95) create_cache_entry" and lines[-1].startswith("... ")
    assert len(lines) == excerpts.NATIVE_EXCERPT_FRAMES + 1


def test_a_frame_outside_every_loaded_object_is_kept_and_named_as_such():
    # R5 via reset_code_caches once jumped to an address in no library (results/native-cpu,
    # r16-rcc trial 5): backtrace prints a bare `[0x...]`, which must not be dropped.
    text = (
        f"{native.BEGIN}\n/c/segv_stack.so(+0x1252)[0x7f02]\n/lib/libc.so.6(+0x3c050)[0x7f01]\n"
        "/lib/libc.so.6(gsignal+0x12)[0x7f03]\n/lib/libc.so.6(+0x3c050)[0x7f01]\n[0x7fc0ddf50840]\n"
        f"{native.END}\n"
    )
    frames = native.native_stack(text)
    assert [str(f) for f in frames] == ["?(0x7fc0ddf50840) outside every loaded object"]
    kept = native.read_kept("# h\n" + native.render(native.resolve(frames), width=None) + "\n")
    assert kept == frames and native.crash_site(kept).startswith("code outside every loaded object")


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="no c++filt")
def test_exported_cxx_symbols_are_demangled_and_offsets_into_missing_files_stay_as_they_are():
    frames = [
        native.NativeFrame(obj="/gone/libx.so", symbol="_ZN5torch6dynamo3runEv+0x10"),
        native.NativeFrame(obj="/gone/liby.so", symbol="+0x1234"),
    ]
    named = native.resolve(frames)
    assert named[0].name == "torch::dynamo::run()" and named[1].name == ""
    assert str(named[0]) == "libx.so(_ZN5torch6dynamo3runEv+0x10) torch::dynamo::run()"


@needs_cc
def test_a_matrix_run_lists_the_native_crash_sites_it_saw(tmp_path, capsys):

    from harness.cli import main

    segv = {"segv": command(str(SCRIPTS / "segfault.py"), hang_s=10)}
    groups = [{"workloads": ["segv"], "strategies": ["raw"]}]
    write_spec(tmp_path, spec_dict(tmp_path, "segv", segv, trials=1, workers=1, groups=groups))
    assert main(["matrix", "--file", str(tmp_path / "spec.json"), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "native crash sites (harness.trial.native;" in out
    assert "Segmentation fault at ctypes:string_at: " in out and " in 1/1 (e.g. segv/segv:raw@-/0)" in out


@needs_cc
def test_stress_echoes_the_native_crash_site_of_a_crashing_run(tmp_path, capsys):
    from harness.cli import main

    segfault = (sys.executable, str(SCRIPTS / "segfault.py"))
    rc = main(stress_args(1, tmp_path / "o", "--timeout", "30", cmd=segfault, parallel=1))
    err = capsys.readouterr().err
    assert rc == 1
    assert "native crash site: " in err and "--- run 0: ABORT" in err
