"""CLI contract: bad input -> one `error:` line, exit 2, nothing written; NaN -> exit 3.

Most cases call `dflash.cli.main` in-process (same code path, no interpreter start-up); a few
run `python -m dflash` as a subprocess to check the real exit status and streams.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dflash import cli
from dflash.data import write_token_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_data(path: str, *, rows: int = 64, length: int = 40, top_id: int = 250) -> str:
    rng = np.random.default_rng(0)
    data = []
    for _ in range(rows):
        ids = rng.integers(1, top_id + 1, size=length).tolist()
        data.append((ids, [0] * (length // 2) + [1] * (length - length // 2)))
    write_token_file(path, iter(data))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code: int, err: str, out_dir, match: str) -> None:
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert match in lines[0], lines[0]
    assert not os.path.exists(out_dir), "bad input created the output folder"


def bad_data_files(tmp_path) -> dict[str, tuple[str, str]]:
    corrupt = tmp_path / "corrupt.arrow"
    good = make_data(str(tmp_path / "good.arrow"))
    corrupt.write_bytes(open(good, "rb").read()[:300])
    return {
        "corrupt": (str(corrupt), ""),
        "empty": (write_empty(tmp_path / "empty.arrow"), "empty"),
        "too-long": (make_data(str(tmp_path / "long.arrow"), length=200), "largest bucket"),
        "vocab": (make_data(str(tmp_path / "vocab.arrow"), top_id=400), "vocabulary mismatch"),
        "missing": (str(tmp_path / "nope.arrow"), "no such file"),
    }


def write_empty(path) -> str:
    write_token_file(str(path), iter([]))
    return str(path)


@pytest.mark.parametrize("kind", ["corrupt", "empty", "too-long", "vocab", "missing"])
def test_bad_data_is_exit_2_with_one_error_line(kind, tmp_path, capsys):
    path, match = bad_data_files(tmp_path)[kind]
    out_dir = tmp_path / "out"
    code, _, err = run_cli(["train", "--out", str(out_dir), "--set", f"data.path={path}"], capsys)
    assert_bad_input(code, err, out_dir, match)


@pytest.mark.parametrize(
    "argv,match",
    [
        (["train", "--preset", "nope"], "unknown preset 'nope'; known presets: tiny-cpu"),
        (["train", "--set", "train.nope=1"], "unknown config key 'train.nope'"),
        (["train", "--set", "train.steps=many"], "invalid int 'many' for --set train.steps"),
        (["train", "--set", "fixes=global-lock,bogus"], "unknown fix 'bogus'"),
        (["train", "--set", "devices.target_devices=cuda:0"], "CUDA is not available"),
        (["train", "--set", "devices.drafter_devices=gpu7"], "unknown device string"),
        (["train", "--steps", "0"], "train.steps must be >= 1"),
        (["train", "--set", "drafter.attention=flex"], "drafter.attention=flex needs CUDA drafter devices"),
        (["train", "--bogus-flag"], "unrecognized arguments"),
        (["train", "--set", "train.oracle_every=-1"], "train.oracle_every and train.oracle_flips must be >= 0"),
        (["bench", "--oracle-every", "-2"], "--oracle-every must be >= 0, got -2"),
        (["export", "--checkpoint", "/nonexistent/ckpt", "--out", "{out}"], "no checkpoint found"),
    ],
)
def test_bad_arguments_are_exit_2(argv, match, tmp_path, capsys):
    out_dir = tmp_path / "out"
    argv = [a.replace("{out}", str(out_dir)) for a in argv]
    if argv[0] == "train":
        argv += ["--out", str(out_dir)]
    code, _, err = run_cli(argv, capsys)
    assert_bad_input(code, err, out_dir, match)


def _subprocess(argv: list[str], tmp_path, **env) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=REPO, **env)
    return subprocess.run(
        [sys.executable, "-m", "dflash", *argv], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300
    )


def test_subprocess_bad_preset_exit_status_and_streams(tmp_path):
    proc = _subprocess(["train", "--preset", "nope", "--out", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: unknown preset 'nope'")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_nan_loss_is_wrong_result_exit_3(tmp_path):
    data = make_data(str(tmp_path / "d.arrow"))
    proc = _subprocess(
        [
            "train",
            "--steps",
            "4",
            "--out",
            str(tmp_path / "out"),
            "--set",
            f"data.path={data}",
            "--set",
            "train.lr=inf",
            "--set",
            "train.progress=false",
        ],
        tmp_path,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "WRONG_RESULT: non-finite loss" in proc.stdout


@pytest.mark.slow
def test_export_roundtrip_from_a_checkpoint(tmp_path):
    data = make_data(str(tmp_path / "d.arrow"))
    run_dir, exp = tmp_path / "run", tmp_path / "exported"
    train = _subprocess(
        [
            "train",
            "--steps",
            "2",
            "--out",
            str(run_dir),
            "--set",
            f"data.path={data}",
            "--set",
            "train.progress=false",
            "--set",
            "train.export=false",
            "--set",
            "train.eval_prompts=0",
        ],
        tmp_path,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    proc = _subprocess(["export", "--checkpoint", str(run_dir), "--out", str(exp)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(os.listdir(exp)) == ["config.json", "model.safetensors", "modeling_dflash.py"]
    again = _subprocess(["export", "--checkpoint", str(run_dir), "--out", str(exp)], tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_prepare_is_dispatched_to_dflash_prepare(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "a", "completion": "b"}\n')
    out = tmp_path / "out.arrow"
    code, _, err = run_cli(["prepare", str(src), "--tokenizer", str(tmp_path / "no-tok"), "--out", str(out)], capsys)
    assert code == 2 and err.startswith("error:")
    assert not out.exists()


def test_override_order_and_empty_fixes():
    args = cli.build_parser().parse_args(
        ["train", "--steps", "7", "--out", "/tmp/x", "--set", "fixes=", "--set", "train.lr=0.5"]
    )
    cfg = cli.config_from_args(args)
    assert (cfg.train.steps, cfg.train.out_dir, cfg.fixes, cfg.train.lr) == (7, "/tmp/x", (), 0.5)
    args = cli.build_parser().parse_args(
        ["train", "--steps", "7", "--set", "train.steps=9", "--set", "fixes=global-lock,graph-isolation"]
    )
    cfg = cli.config_from_args(args)
    assert cfg.train.steps == 9 and cfg.fixes == ("global-lock", "graph-isolation")
