"""Fast CPU checks of repro/r21_inductor_mix_order_workspace.py. The failure it waits for needs
torch 2.11 + CUDA (Inductor's Triton backend); here: its CLI and skip, and that its default shapes
and its signature are the trainer's stored failure (results/gpu-shape2, family
mix-order, pytorch#174379). With `-m cuda` on 2.11: it reproduces and --no-mix-order holds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.diagnosis.families import family
from harness.stores.store import Store
from harness.trial.signature import crash_signature

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "repro" / "r21_inductor_mix_order_workspace.py"
STORE = ROOT / "results" / "gpu-shape2"
# (batch, context length) -> the stored trainer trial that failed with it (gpu-gpu-bound drafter:
# 64 anchors of 16 rows, 8 KV heads of head_dim 64). Sizes read off the generated line: nsplit =
# s72*s72 + ceil(s70*s72/16) with s72 = 64, s70 = 256; 64*s18 + ceil(s18*s7/16) with s18 = 21
# (batch of the <=768 bucket), s7 = 768.
STORED = {
    (64, 256): "gpu-shape2_gb-default-1d-dynamic_raw_-_0-b2183898",  # gb-default-1d-dynamic:raw@-/0
    (21, 768): "gpu-shape2_gb-default-1t1d_raw_-_0-c995e5ea",  # gb-default-1t1d:raw@-/0
}


def stored_output(folder: str) -> str:
    """The stored trial's output.txt, from its folder or its zip (harness pack)."""
    store = Store(STORE)
    record = next(r for r in store.load() if Path(r.artefacts).name == folder)
    return (store.artefacts_of(record) / "output.txt").read_text()


def load_script():
    spec = importlib.util.spec_from_file_location("r21_repro", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    # Its `from _common import ...` finds repro/_common.py as when it runs as a script.
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(mod)  # defines only; main() runs under __name__ == "__main__"
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return mod


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_HEARTBEAT"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)


def message_on_2_11(
    batch: int, ctx_len: int, anchors: int = 64, heads: int = 8, head_dim: int = 64, split: int = 128
) -> str:
    """2.11's error for rows = heads * batch * (ctx_len + 16 * anchors): nsplit = ceil(rows /
    split) = head + tail, with head = 16 * anchors * batch * heads / split pulled out of the
    ceiling; `idx * head + tail * r : (idx + 1) * head + tail * r` is `head` elements long.
    split 128: the H200's (132 SMs) for these row counts."""
    rows = heads * batch * (ctx_len + 16 * anchors)
    head = heads * batch * 16 * anchors // split
    nsplit = -(-rows // split)
    return f"shape '[{nsplit}, {head_dim}]' is invalid for input of size {head}"


def test_default_shapes_are_the_stored_failures_and_give_their_messages():
    mod = load_script()
    defaults = mod.parse_shapes("64x256,21x768")
    assert sorted(defaults) == sorted(STORED)
    for shape, folder in STORED.items():
        output = stored_output(folder)
        expected = message_on_2_11(*shape)
        assert f"RuntimeError: {expected}" in output, (shape, folder)
        assert mod.SIGNATURE in expected


def test_help_lists_knobs_and_parses_without_torch():
    res = run("--help")
    assert res.returncode == 0, res.stderr
    for knob in ("--shapes", "--anchors", "--no-mix-order", "--fix", "--switch-interval"):
        assert knob in res.stdout


@pytest.mark.parametrize("args", [("--shapes", "64"), ("--shapes", "1x256"), ("--fix", "no-such-fix")])
def test_bad_arguments_exit_2(args):
    res = run(*args)
    assert res.returncode == 2
    assert "error:" in res.stderr


def test_without_cuda_it_skips_with_exit_0():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: the script would really run")
    for args in ((), ("--no-mix-order",)):
        res = run(*args)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "SKIP: needs CUDA"


def test_stored_trainer_failures_are_family_mix_order():
    for folder in STORED.values():
        sig = crash_signature(stored_output(folder), rc=1)
        assert family(sig.summary) == "mix-order", sig.summary


@pytest.mark.cuda
@pytest.mark.xfail(
    reason="not yet seen to reproduce on the H200: a draft of the script ran clean 3/3 "
    "(H200, torch 2.11, 2026-12-01); XPASS says it now does",
    strict=False,
)
def test_reproduces_on_2_11_and_workaround_holds():
    import torch

    if not torch.__version__.startswith("2.11"):
        pytest.skip(f"pytorch#174379 is fixed after 2.11 (#176008); torch {torch.__version__}")
    plain, fixed = run(), run("--no-mix-order")
    assert plain.returncode == 1 and "REPRODUCED: RuntimeError: shape" in plain.stdout, plain.stdout + plain.stderr
    assert fixed.returncode == 0 and "NOT REPRODUCED" in fixed.stdout, fixed.stdout + fixed.stderr
