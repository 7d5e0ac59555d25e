"""`fixes=recommended` resolves at start to harness.runtime.fixes.recommended_sets.recommended's set for the installed torch,
the plan's device kind and the compile mode, prints that line and stores the resolved names;
`fixes=none` (and `fixes=`, as the harness's raw cells pass it) is the raw pipeline; GPU presets
default to recommended, CPU presets to raw; a bad value is one `error:` line and exit 2."""

from __future__ import annotations

import json
import os

import pytest
import torch
from small_run import small_cli_args, small_config
from test_cli import assert_bad_input, run_cli

from dflash import checkpoint, cli, presets
from dflash.train import Trainer
from harness.runtime.errors import ConfigError
from harness.runtime.fixes import FIXES, FixSet
from harness.runtime.fixes.recommended_sets import recommended, resolve_names

GPU_PRESETS = ("gpu-default", "gpu-launch-bound", "gpu-gpu-bound", "gpu-multi")


@pytest.mark.parametrize("device, cudagraphs", [("cpu", False), ("cuda", False), ("cuda", True)])
def test_recommended_resolves_per_device_kind_and_cudagraphs(device, cudagraphs):
    rec = recommended(torch.__version__, device, cudagraphs=cudagraphs)
    names, got = resolve_names(["recommended"], torch.__version__, device, cudagraphs=cudagraphs)
    assert got == rec and names == rec.names and names
    assert all(n in FIXES for n in names)
    # Extra names join the recommended set, after it and once.
    extra, _ = resolve_names(
        ["recommended", "sequential-startup", rec.names[0]], torch.__version__, device, cudagraphs=cudagraphs
    )
    assert extra == (*rec.names, "sequential-startup")


def test_resolution_depends_on_device_and_mode():
    cpu = resolve_names(["recommended"], "2.11.0", "cpu", cudagraphs=False)[0]
    cuda = resolve_names(["recommended"], "2.11.0", "cuda", cudagraphs=False)[0]
    graphs = resolve_names(["recommended"], "2.11.0", "cuda", cudagraphs=True)[0]
    assert len({cpu, cuda, graphs}) == 3
    assert "global-lock" in cuda and "global-lock" not in cpu and "stream-sync" in graphs


@pytest.mark.parametrize("names", [(), ("none",), (" none ",)])
def test_none_and_empty_are_raw(names):
    assert resolve_names(names, torch.__version__, "cuda", cudagraphs=True) == ((), None)
    assert FixSet.from_names(names).names() == ()


def test_explicit_names_are_not_touched():
    assert resolve_names(["global-lock", "stream-sync"], "2.11.0", "cuda", cudagraphs=True) == (
        ("global-lock", "stream-sync"),
        None,
    )
    with pytest.raises(ConfigError, match="resolved by the trainer"):
        FixSet.from_names(["recommended"])


@pytest.mark.parametrize(
    "value, match",
    [
        ("recommended,bogus", "unknown fix 'bogus'"),
        ("none,global-lock", "fixes=none means no fix at all; it cannot be combined with global-lock"),
        ("Recommended", "unknown fix 'Recommended'"),
    ],
)
def test_bad_fixes_value_is_one_error_line_exit_2(value, match, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, _, err = run_cli(["train", "--out", str(out_dir), "--set", f"fixes={value}"], capsys)
    assert_bad_input(code, err, out_dir, match)
    assert len(err.strip().splitlines()) == 1


def test_gpu_presets_default_to_recommended_cpu_presets_to_raw():
    for name in presets.PRESETS:
        want = ("recommended",) if name in GPU_PRESETS else ()
        assert presets.get(name).fixes == want, name


def test_harness_raw_cell_runs_no_fixes_on_a_gpu_preset():
    """The harness passes `--set fixes=` for a cell without fixes: the preset's default must not
    leak into a raw cell, and a cell's own fixes are exactly what runs."""
    from harness.trial.spec import TrialSpec, WorkloadSpec, argv_for

    for fixes in ((), ("global-lock", "stream-sync")):
        spec = TrialSpec(
            trial_id="t",
            cell="c",
            fixes=fixes,
            workload=WorkloadSpec(kind="dflash", argv=("--preset", "gpu-launch-bound")),
        )
        argv = argv_for(spec)
        assert argv[1:4] == ["-m", "dflash", "train"]
        cfg = cli.config_from_args(cli.build_parser().parse_args(argv[3:]))
        assert resolve_names(cfg.fixes, "2.11.0", "cuda", cudagraphs=True) == (fixes, None)


@pytest.mark.slow
def test_train_with_recommended_prints_the_line_and_stores_the_resolved_names(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", *small_cli_args(str(run)), "--set", "train.steps=2", "--set", "fixes=recommended"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err[-2000:]
    rec = recommended(torch.__version__, "cpu", cudagraphs=False)
    assert err.splitlines().count(rec.line()) == 1
    final = json.loads(out.strip().splitlines()[-1])
    assert final["event"] == "final" and final["fixes"] == list(rec.names)
    assert final["fixes_recommended"] == rec.line()
    # target-hook-taps (the CPU set) acts on every target forward: the set really ran.
    assert all(final["fix_counts"][n] > 0 for n in rec.names), final["fix_counts"]
    assert checkpoint.load(str(run)).config["fixes"] == list(rec.names)


def test_fixes_none_prepares_the_raw_pipeline(tmp_path):
    import dataclasses

    cfg = dataclasses.replace(small_config(tmp_path / "run"), fixes=("none",))
    trainer = Trainer(cfg)
    trainer.prepare()
    assert trainer.fs.names() == () and trainer.cfg.fixes == () and trainer.recommendation is None
    assert not os.path.exists(tmp_path / "run")


def test_gpu_presets_compile_as_report_recommends_and_resolve_its_fix_set():
    """launch-bound: reduce-overhead with the five-fix set; gpu-default and gpu-bound: eager, no fix
    (gpu-multi, never run eager, compiles as gpu-default did)."""
    lb, gb = presets.get("gpu-launch-bound"), presets.get("gpu-gpu-bound")
    assert lb.compile.mode == "reduce-overhead" and gb.compile.mode == "none"
    assert presets.get("gpu-default").compile.mode == "none" and presets.get("gpu-multi").compile.mode == "default"
    names, rec = resolve_names(lb.fixes, "2.11.0+cu130", "cuda", cudagraphs=lb.compile.cudagraphs)
    assert names == ("global-lock", "cstash-tls-init", "cublas-handle-init", "stash-incref", "stream-sync")
    assert rec is not None and rec.measured
    names, rec = resolve_names(gb.fixes, "2.11.0+cu130", "cuda", cudagraphs=False, compiled=False)
    assert names == () and rec is not None and "gpu-bound:eager 0/44" in rec.evidence
    assert "gpu-exposure default:eager 0/29" in rec.evidence
    assert rec.line().startswith("fixes=recommended -> none (measured")
