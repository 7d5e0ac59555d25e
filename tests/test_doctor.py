"""harness doctor: the facts known for CPU torch 2.13 come out of the real probes, a failed probe
reads `unknown (probe failed: ...)` (never a guess), and the expected-races part follows the
catalogue's needs_cuda and probe fields."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from harness import cli
from harness.diagnosis import doctor, probes
from harness.diagnosis.probes import ProbeResult, Script

ON_CPU_213 = torch.__version__.startswith("2.13.") and not torch.cuda.is_available()

KNOWN_CPU_213 = {
    # Each value was read off this machine's probes and matches the installed torch's source.
    "torch_build": "cpu",
    "cuda_available": False,
    "gpu_count": 0,
    "free_threaded": False,
    "config_per_thread": True,  # F14 / R9
    "config_process_global": False,
    "fx_tracing_flag_global": True,  # F2 / R1
    "current_patcher_global": True,  # F3 / R3
    "fx_module_patch_global": True,  # R4
    "is_compiling_global": True,  # R8
    "cudagraph_trees_capture_lock": True,  # graph_capture_lock (PR #184357) is in 2.13
    "cudagraph_trees_per_thread_state": True,  # 2.13's get_obj seeds a fresh thread lazily
    "cudagraph_trees_fresh_thread_asserts": False,
    "cudagraph_callables_shared": True,
    "stash_steals_reference": False,  # 2.13's binding increfs (harness.runtime.fixes.StashIncref)
    "stash_dropped_after_join": True,  # C++ thread_local destructors run after join() (r26)
    "reset_locked": True,
}


@pytest.fixture(scope="module")
def real_results():
    return probes.run_probes(timeout_s=120)


@pytest.mark.skipif(not ON_CPU_213, reason="the expected facts are those of CPU torch 2.13")
def test_real_probes_report_the_facts_of_cpu_torch_2_13(real_results):
    assert set(real_results) == {f.key for f in probes.PROBES}
    failed = {k: r.error for k, r in real_results.items() if not r.ok}
    assert not failed
    assert {k: real_results[k].value for k in KNOWN_CPU_213} == KNOWN_CPU_213
    assert real_results["torch_version"].value == torch.__version__
    report = doctor.build_report(real_results)
    text = doctor.format_text(report)
    assert "config_per_thread: True  (config is per-thread" in text
    assert "cuda_available: False  (no CUDA device" in text
    assert [r.key for r in report.recommended] == ["recommended_cpu"]  # no CUDA: no cuda lines
    assert report.recommended[0].line.startswith("fixes=recommended -> ")


def test_probes_are_listed_once_and_each_comes_from_a_script():
    keys = [f.key for f in probes.PROBES]
    assert len(keys) == len(set(keys))
    produced = [k for s in probes.SCRIPTS for k in s.facts]
    assert sorted(produced) == sorted(keys)
    for fact in probes.PROBES:
        assert fact.description and "\n" not in fact.description, fact.key
        assert fact.script in {s.name for s in probes.SCRIPTS}
        assert fact.key in next(s for s in probes.SCRIPTS if s.name == fact.script).facts


def test_torch_compiled_from_source_is_bytecode_neither_cached_nor_written(torch_bytecode_written):
    script = next(s for s in probes.SCRIPTS if "torch_compiled_from_source" in s.facts)
    facts, _ = probes.run_script(script)
    assert facts["torch_compiled_from_source"] is not torch_bytecode_written


def test_a_probe_that_crashes_hangs_or_says_nothing_is_unknown_not_guessed():
    scripts = (
        Script("config", ("config_per_thread", "config_process_global"), "import os; os.abort()"),
        Script("fx", ("fx_tracing_flag_global",), "import time; time.sleep(30)"),
        Script("stash", ("stash_steals_reference",), "print('no marker')"),
        Script("reset", ("reset_locked",), "raise SystemExit('source unreadable')"),
        Script(
            "dynamo",
            ("gpu_names", "is_compiling_global"),
            probes._PRELUDE
            + (
                "part(('gpu_names',), lambda: {'gpu_names': [1 / 0]})\n"
                "part(('is_compiling_global',), lambda: {'is_compiling_global': True})\nemit()"
            ),
        ),
        Script("python", ("python_version",), probes._PRELUDE + "emit({'something_else': 1})"),
        Script(
            "torch",
            ("torch_version", "cuda_available"),
            probes._PRELUDE + "emit({'torch_version': '2.11.0+cu130', 'cuda_available': True})",
        ),
    )
    results = probes.run_probes(scripts, timeout_s=3)
    assert results["config_per_thread"].error.startswith("killed by SIGABRT")
    assert results["config_process_global"].error.startswith("killed by SIGABRT")
    assert results["fx_tracing_flag_global"].error == "timed out after 3 s"
    assert results["stash_steals_reference"].error == "exited 0 without a result line"
    assert results["reset_locked"].error == "exit 1: source unreadable"
    assert results["python_version"].error == "the probe did not report it"
    # A script's part that raises costs only its own facts.
    assert results["gpu_names"].error == "ZeroDivisionError: division by zero"
    assert results["is_compiling_global"].value is True and results["is_compiling_global"].ok
    assert all(r.value is None for k, r in results.items() if not r.ok)
    # What a script reports is what the doctor says: here a made-up CUDA build.
    assert results["torch_version"].value == "2.11.0+cu130" and results["cuda_available"].value is True
    text = doctor.format_text(doctor.build_report(results, load=lambda: FakeCatalogue(())))
    assert "config_per_thread: unknown (probe failed: killed by SIGABRT" in text
    assert "reset_locked: unknown (probe failed: exit 1: source unreadable)" in text
    assert "config_per_thread: True" not in text and "config_per_thread: False" not in text
    assert "recommended_cuda_cudagraphs: fixes=recommended -> " in text  # from the reported CUDA


def test_recommended_needs_the_torch_version():
    results = {"torch_version": ProbeResult("torch_version", "torch", error="exit 1: boom")}
    report = doctor.build_report(results, load=lambda: FakeCatalogue(()))
    assert report.recommended == ()
    assert "recommended: unknown (torch_version is unknown (probe failed: exit 1: boom))" in doctor.format_text(report)


@dataclass(frozen=True)
class FakeRace:
    id: str
    title: str
    needs_cuda: bool
    probe: str | None


@dataclass(frozen=True)
class FakeCatalogue:
    races: tuple[FakeRace, ...]


def test_expected_races_follow_needs_cuda_and_the_named_probe():
    ok = lambda key, value: ProbeResult(key, "x", value=value)  # noqa: E731
    results = {
        "cuda_available": ok("cuda_available", False),
        "fx_tracing_flag_global": ok("fx_tracing_flag_global", True),
        "config_per_thread": ok("config_per_thread", False),
        "reset_locked": ok("reset_locked", True),
        "stash_steals_reference": ProbeResult("stash_steals_reference", "stash", error="killed by SIGSEGV"),
    }
    catalogue = FakeCatalogue(
        (
            FakeRace("F1", "cudagraph TLS", True, "!cudagraph_trees_per_thread_state"),
            FakeRace("F2", "fx flag", False, "fx_tracing_flag_global"),
            FakeRace("F14", "config per thread", False, "config_per_thread"),
            FakeRace("R5", "reset", False, "!reset_locked"),
            FakeRace("r22", "stash", False, "stash_steals_reference"),
            FakeRace("F10", "duplicates", False, None),
            FakeRace("X", "typo", False, "no_such_probe"),
        )
    )
    races = doctor.race_expectations(results, load=lambda: catalogue)
    got = {r.id: (r.status, r.reason) for r in races.races}
    assert got["F1"] == ("not expected", "needs CUDA; cuda_available is False")
    assert got["F2"] == ("expected", "needs fx_tracing_flag_global True; here fx_tracing_flag_global is True")
    assert got["F14"][0] == "not expected"
    assert got["R5"] == ("not expected", "needs reset_locked False; here reset_locked is True")
    assert got["r22"] == ("unknown", "probe stash_steals_reference failed: killed by SIGSEGV")
    assert got["F10"] == ("possible", "no probe decides it")
    assert got["X"][0] == "unknown" and "no_such_probe" in got["X"][1]
    text = doctor.format_text(doctor.build_report(results, load=lambda: catalogue))
    assert (
        "race F2: expected  (fx flag; needs fx_tracing_flag_global True; here fx_tracing_flag_global is True)" in text
    )


def test_a_catalogue_that_does_not_load_costs_only_its_section():
    def broken():
        raise ImportError("cannot import name 'load'")

    races = doctor.race_expectations({}, load=broken)
    assert not races.available and races.error == "ImportError: cannot import name 'load'"
    text = doctor.format_text(doctor.DoctorReport((), (), None, races))
    assert text == "expected races: unknown (catalogue not available: ImportError: cannot import name 'load')\n"


def test_cli_doctor_json_and_bad_input(monkeypatch, capsys):
    fake = (
        Script("python", ("python_version",), probes._PRELUDE + "emit({'python_version': 'CPython 9.9'})"),
        Script("torch", ("torch_version", "cuda_available"), "import os; os.abort()"),
    )
    monkeypatch.setattr(probes, "SCRIPTS", fake)
    assert cli.main(["doctor", "--json", "--timeout", "30"]) == 0
    data = json.loads(capsys.readouterr().out)
    facts = {f["key"]: f for f in data["facts"]}
    assert facts["python_version"]["value"] == "CPython 9.9" and facts["python_version"]["ok"]
    assert facts["torch_version"]["ok"] is False and facts["torch_version"]["error"].startswith("killed by SIGABRT")
    assert data["recommended"] == [] and data["recommended_error"].startswith("torch_version is unknown")
    assert cli.main(["doctor"]) == 0
    assert "python_version: CPython 9.9  (" in capsys.readouterr().out
    assert cli.main(["doctor", "--timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_each_race_says_what_was_measured_on_this_torch_or_that_nothing_was():
    # The real catalogue and committed stores (results/catalogue-cpu, results/versions-cpu-torch*):
    # F2 is gone on 2.14 (PR #168999), R5 is not; a torch nobody ran has no record, said as such.
    def races_on(version):
        results = {
            "torch_version": ProbeResult("torch_version", "x", value=version),
            "cuda_available": ProbeResult("cuda_available", "x", value=False),
        }
        return {r.id: r.on_this_torch for r in doctor.race_expectations(results).races}

    on_214 = races_on("2.14.1")
    # F2's fix cells there: r06 nested-fx-fallback (29 trials) and r14 global-lock (10); R5's: r16 global-lock (29).
    assert on_214["F2"].startswith("torch 2.14 measured: not reproduced 0/20, fix no longer needed (0/39 failed)")
    assert "PR #168999" in on_214["F2"]
    assert on_214["R5"].startswith("torch 2.14 measured: reproduces ") and "fix holds (0/29 failed)" in on_214["R5"]
    assert races_on("2.13.0+cpu")["F1"].startswith("torch 2.13 not measured: predicted (source)")
    assert races_on("2.16.0")["R4"] == (
        "torch 2.16: no record (the catalogue has 2.11, 2.13, 2.14, 2.15): "
        "`harness matrix --preset versions-cpu` measures the CPU rows"
    )
    assert races_on("2.16.0")["segv"] == ""  # a generic family has no versions to speak of


def test_without_cuda_the_cuda_facts_and_races_are_one_line_each_and_the_trainer_comes_last():
    ok = lambda key, value: ProbeResult(key, "x", value=value)  # noqa: E731
    results = {
        k: ok(k, v)
        for k, v in (
            ("torch_version", "2.13.0+cpu"),
            ("cuda_available", False),
            ("gpu_count", 0),
            ("cudagraph_callables_shared", True),
        )
    }
    catalogue = FakeCatalogue((FakeRace("F1", "tls", True, None), FakeRace("F2", "fx flag", False, None)))
    probed = {k: results[k] for k in ("cuda_available", "gpu_count", "cudagraph_callables_shared")}
    report = doctor.build_report(probed, load=lambda: catalogue)
    recs = doctor.recommended_sets(results)[0]
    text = doctor.format_text(doctor.DoctorReport(report.facts, recs, None, report.races))
    lines = text.splitlines()
    assert "gpu_count: 0" not in text and not any(ln.startswith("cudagraph_") for ln in lines)
    assert (
        "not on this build (no CUDA device): 2 facts about GPUs and CUDA graphs "
        "(gpu_count, cudagraph_callables_shared; `--json` has each)"
    ) in lines
    assert "race F1" not in text and "races that need CUDA, not expected here: F1" in lines
    assert lines[-2] == "for the bundled trainer (python -m dflash train --set fixes=recommended):"
    assert lines[-1].startswith("recommended_cpu: fixes=recommended -> ")


@pytest.mark.parametrize("setting, off", [("default", False), ("disabled", True), ("under-a-file", True)])
def test_the_drivers_kernel_cache_is_off_where_disabled_or_not_writable(monkeypatch, tmp_path, setting, off):
    monkeypatch.delenv("CUDA_CACHE_DISABLE", raising=False)
    monkeypatch.setenv("CUDA_CACHE_PATH", str(tmp_path / "not-yet" / "ComputeCache"))  # made by the driver
    if setting == "disabled":
        monkeypatch.setenv("CUDA_CACHE_DISABLE", "1")
    elif setting == "under-a-file":
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("CUDA_CACHE_PATH", str(tmp_path / "a-file" / "ComputeCache"))
    script = next(s for s in probes.SCRIPTS if "cuda_kernel_cache_off" in s.facts)
    facts, _ = probes.run_script(script)
    assert facts["cuda_kernel_cache_off"] is off
