"""Every command the README and docs/operations.md show still works: each parses, each program's
`--help` answers, and the quick read-only ones run against the committed stores (exit 0, output as
described)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dflash.cli import build_parser as dflash_parser
from dflash.prepare import build_parser as prepare_parser
from harness.cli import COMMANDS
from harness.cli import build_parser as harness_parser

ROOT = Path(__file__).resolve().parents[1]
README = "\n".join((ROOT / doc).read_text(encoding="utf-8") for doc in ("README.md", "docs/operations.md"))


def _lines(program: str) -> list[str]:
    """The docs' `python -m PROGRAM ...` lines, without their comments, synopsis lines left out."""
    found = [
        m.group(1).split("  #")[0].strip()
        for m in re.finditer(
            rf"^(?:bash \.ci/setup && \.venv/bin/)?python3? -m {program} (.+)$", README, flags=re.MULTILINE
        )
    ]
    return [c for c in found if "[--" not in c and "[-" not in c.split(" ", 1)[-1][:2]]


def test_every_readme_command_of_the_harness_and_the_trainer_parses():
    harness, dflash = _lines("harness"), _lines("dflash")
    assert len(harness) >= 15 and len(dflash) >= 3
    for cmd in harness:
        harness_parser().parse_args(shlex.split(cmd))
    for cmd in dflash:
        argv = shlex.split(cmd)
        # `prepare` owns its flags (dflash.cli dispatches it before parsing)
        (prepare_parser().parse_args(argv[1:]) if argv[0] == "prepare" else dflash_parser().parse_args(argv))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_harness_command_answers_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        harness_parser().parse_args([command, "--help"])
    assert done.value.code == 0
    assert f"usage: python -m harness {command}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "harness", "--help"],
        ["-m", "dflash", "train", "--help"],
        ["-m", "tools.layers"],
        ["repro/r06_fx_tracing_flag.py", "--help"],
    ],
)
def test_entry_points_answer_in_a_fresh_process(argv):
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


QUICK = {
    # README line (as written there) -> a line its output must hold
    "matrix --list": "gpu-campaign: 96 cells",
    "matrix --preset gpu-campaign --pending": "planned trials",
    "matrix --preset gpu-campaign --replay-last 38 --per-gpu 12 --workers 16 --pack-by-memory 139.8": "gpu-campaign, last 38 records: strict order",
    "crosstab cstash-tls-init --family segv,segv-gc": "| total |",
    "families --store results/gpu-campaign --store results/gpu-topology-4": "trials that count: torch 2.11.0",
    "diagnose 'gpu-repros/r01:raw@-/0'": "F1",
    "show 'gpu-campaign/launch-bound:local-tls-init@-/0'": "python -m harness replay",
}


@pytest.mark.parametrize("line", sorted(QUICK))
def test_the_quick_readme_commands_run_on_the_committed_stores(line):
    assert line in _lines("harness"), f"the README no longer shows `python -m harness {line}`"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *shlex.split(line)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert QUICK[line] in proc.stdout, proc.stdout[-2000:]


def test_the_readme_fits_and_its_commands_write_only_ignored_folders():
    """The README stays short, and what its commands write into the checkout (a stress run's `-o`,
    an export's or prepare's `--out`, the main job's `runs/`) is ignored by git: a user who follows
    it never sees their output as changes to commit."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    written = set(re.findall(r"^python3? -m \S+ .*?(?:-o|--out|--output) ([\w./-]+)", text, flags=re.MULTILINE))
    written = {w for w in written if not w.isupper()}  # DIR, FILE: placeholders
    assert {"failures", "drafter-hf", "data.arrow"} <= written, written
    written |= {"runs/cpu-quick", "runs/tiny-cpu", "runs/lift"}  # matrix, dflash train, lift defaults
    for path in sorted(written):
        probe = path if "." in Path(path).name else f"{path}/x"
        check = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT, capture_output=True)
        if check.returncode == 128:
            pytest.skip("not a git checkout")
        assert check.returncode == 0, f"{path} (written by a README command) is not in .gitignore"
