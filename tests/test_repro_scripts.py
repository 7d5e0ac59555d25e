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
    "r01_cgt_tls_fresh_thread": "GPU",
    "r02_cgt_tls_backward": "GPU",
    "r03_cgt_reset_worker": "GPU",
    "r04_shared_graph_two_threads": "GPU",
    "r05_concurrent_record_rng": "GPU",
    "r06_fx_tracing_flag": "CPU",
    "r07_current_patcher": "CPU",
    "r08_config_patch_lost": "CPU",
    "r09_per_thread_state_recompile": "CPU",
    "r10_checkpoint_cudagraphs": "GPU",
    "r11_duplicate_compiles": "CPU",
    "r12_legacy_cudagraphs_ptr": "GPU",
    "r13_config_thread_local": "CPU",
    "r14_fx_flag_stuck": "CPU",
    "r15_eager_module_under_tracer": "CPU",
    "r16_reset_segfault": "CPU",
    "r17_recompile_limit_eager_fallback": "CPU",
    "r18_is_compiling_leak_adam": "CPU",
    "r19_hf_output_capture_under_compile": "CPU",
    "r20_flex_backward_compile_deadlock": "GPU",
    "r21_inductor_mix_order_workspace": "GPU",
    "r22_stash_tls_refcount": "CPU",
    "r23_device_sync_during_capture": "GPU",
    "r24_compiled_graph_under_tracer": "CPU",
    "r25_double_block_mask": "CPU",
    "r26_stash_exit_finalize": "CPU",
    "r27_dict_mutation": "CPU",
    "r28_stance_leak": "CPU",
    "r29_fake_guard_thread_exit": "CPU",
}
GPU = sorted(k for k, v in CATALOGUE.items() if v == "GPU")
SECTIONS = ("Symptom:", "Mechanism:", "Trigger:", "Affected versions:", "Fix:", "Upstream:")
COMMON = REPRO / "_common.py"
TIMEOUT_S = 120


def script(name: str) -> Path:
    return REPRO / f"{name}.py"


def run(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script(name)), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, **(env or {})},
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


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level by def, class or assignment."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def shared_helper_problems(source: str) -> list[str]:
    """Why a script's source does not use the shared helpers as it should: it must import from
    `_common` and must not define its own copy of anything `_common.py` defines (a copy would
    drift from the protocol the harness relies on)."""
    tree = ast.parse(source)
    problems = []
    if not any(isinstance(n, ast.ImportFrom) and n.module == "_common" and n.level == 0 for n in tree.body):
        problems.append("no top-level `from _common import ...`")
    shared = top_level_names(ast.parse(COMMON.read_text()))
    problems += [f"re-defines {name}" for name in sorted(top_level_names(tree) & shared)]
    return problems


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_script_imports_shared_helpers_and_defines_none(name):
    assert shared_helper_problems(script(name).read_text()) == []


def test_shared_helper_check_catches_a_copy():
    copy = "import argparse\n\n\ndef run_threads(bodies, deadline_s):\n    pass\n\n_HB = {}\n"
    assert shared_helper_problems(copy) == [
        "no top-level `from _common import ...`",
        "re-defines _HB",
        "re-defines run_threads",
    ]
    assert shared_helper_problems("from _common import beat\n\n\ndef beat():\n    pass\n") == ["re-defines beat"]


def test_shared_helpers_need_only_the_stdlib():
    tree = ast.parse(COMMON.read_text())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert top <= set(sys.stdlib_module_names), top - set(sys.stdlib_module_names)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_help_works_without_importing_torch(name):
    # Python's import-time profile lists every module imported, one per stderr line.
    proc = run(name, "--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "--fix" in proc.stdout and "--switch-interval" in proc.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "_common" in imported
    assert not imported & {"torch", "dflash", "harness"}, imported & {"torch", "dflash", "harness"}


def test_unknown_fix_is_one_error_line_exit_2():
    proc = run("r13_config_thread_local", "--fix", "no-such-fix")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: unknown fix 'no-such-fix'")


def test_r26_rejects_an_empty_run_in_one_line():
    # 0 rounds would print NOT REPRODUCED (0/0): a count of nothing.
    proc = run("r26_stash_exit_finalize", "--rounds", "0")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: --rounds and --threads must be >= 1, --release-s >= 0"


@pytest.mark.parametrize(
    "name, args, line",
    [
        ("r27_dict_mutation", ("--traces", "0"), "error: --traces must be >= 1 and --items >= 0"),
        ("r28_stance_leak", ("--calls", "0"), "error: --calls must be >= 1"),
        ("r29_fake_guard_thread_exit", ("--workers", "0"), "error: --workers must be >= 1"),
    ],
)
def test_an_empty_run_is_one_error_line(name, args, line):
    # 0 traces or calls would print NOT REPRODUCED over nothing.
    proc = run(name, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == line


def test_gpu_scripts_skip_cleanly_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: the GPU scripts would really run")
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(script(name))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
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
