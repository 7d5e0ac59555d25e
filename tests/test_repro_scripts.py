"""Fast checks of the repro catalogue: names, docstrings, CLI, skips, one deterministic repro."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "repro"
CATALOGUE = {
    "r01_cgt_tls_fresh_thread": "GPU", "r02_cgt_tls_backward": "GPU", "r03_cgt_reset_worker": "GPU",
    "r04_shared_graph_two_threads": "GPU", "r05_concurrent_record_rng": "GPU",
    "r06_fx_tracing_flag": "CPU", "r07_current_patcher": "CPU", "r08_config_patch_lost": "CPU",
    "r09_per_thread_state_recompile": "CPU", "r10_checkpoint_cudagraphs": "GPU",
    "r11_duplicate_compiles": "CPU", "r12_legacy_cudagraphs_ptr": "GPU",
    "r13_config_thread_local": "CPU", "r14_fx_flag_stuck": "CPU",
    "r15_eager_module_under_tracer": "CPU", "r16_reset_segfault": "CPU",
    "r17_recompile_limit_eager_fallback": "CPU", "r18_is_compiling_leak_adam": "CPU",
    "r19_hf_output_capture_under_compile": "CPU", "r20_flex_backward_compile_deadlock": "GPU",
    "r21_inductor_mix_order_workspace": "GPU", "r22_stash_tls_refcount": "CPU",
    "r23_device_sync_during_capture": "GPU",
}
GPU = sorted(k for k, v in CATALOGUE.items() if v == "GPU")
SECTIONS = ("Symptom:", "Mechanism:", "Trigger:", "Affected versions:", "Fix:", "Upstream:")
PREAMBLE = re.compile(r"# --- shared repro preamble.*?# --- end of shared repro preamble ---", re.S)
TIMEOUT_S = 120


def script(name: str) -> Path:
    return REPRO / f"{name}.py"


def run(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script(name)), *args], capture_output=True, text=True,
        timeout=TIMEOUT_S, env={**os.environ, **(env or {})},
    )


def test_catalogue_is_complete_and_nothing_else():
    found = {p.stem for p in REPRO.glob("r[0-9][0-9]_*.py")}
    assert found == set(CATALOGUE)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_docstring_has_required_sections(name):
    source = script(name).read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert doc.startswith(f"{name}: "), "docstring starts with the id and a one-line summary"
    for section in SECTIONS:
        assert f"\n{section}" in doc, f"{name}: missing section {section}"
    assert re.search(r"#\d{5,6}", doc), f"{name}: cites no upstream issue/PR number"
    assert source.isascii(), f"{name}: non-ASCII text"


def test_shared_preamble_is_identical_everywhere():
    blocks = {name: PREAMBLE.search(script(name).read_text()) for name in CATALOGUE}
    assert all(blocks.values()), [n for n, m in blocks.items() if m is None]
    assert len({m.group(0) for m in blocks.values()}) == 1


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_help_works_without_importing_torch(name):
    proc = run(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--fix" in proc.stdout and "--switch-interval" in proc.stdout


def test_unknown_fix_is_one_error_line_exit_2():
    proc = run("r13_config_thread_local", "--fix", "no-such-fix")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: unknown fix 'no-such-fix'")


def test_gpu_scripts_skip_cleanly_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: the GPU scripts would really run")
    procs = {
        name: subprocess.Popen([sys.executable, str(script(name))], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        for name in GPU
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, f"{name}: {err}"
        assert out.strip() == "SKIP: needs CUDA", f"{name}: {out!r}"


def test_r13_reproduces_and_writes_heartbeat(tmp_path):
    beat = tmp_path / "hb"
    proc = run("r13_config_thread_local", "--threads", "2", env={"HARNESS_HEARTBEAT": str(beat)})
    assert proc.returncode == 1, proc.stderr
    assert "WRONG_RESULT: main set error_on_nested_fx_trace=False but 2/2 worker threads see True" in proc.stdout
    counter, stamp = beat.read_text().split()
    assert int(counter) >= 1 and float(stamp) > 0


def test_r13_does_not_reproduce_with_its_fix():
    proc = run("r13_config_thread_local", "--threads", "2", "--fix", "nested-fx-fallback")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "NOT REPRODUCED (workers seeing main's config: 2/2)"
