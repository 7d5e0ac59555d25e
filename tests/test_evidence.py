"""The package carries its knowledge: the counts diagnose cites ship in harness/diagnosis/evidence.json
(held fresh against the stores), and an installed package (pip, not editable) run from a folder
outside the checkout cites the same counts and runs its repros."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.diagnosis import diagnose, evidence
from harness.diagnosis.catalogue import RecordSource

ROOT = Path(__file__).resolve().parents[1]
F2_LOG = (
    'Exception in thread worker-1:\nTraceback (most recent call last):\n  File "/srv/app.py", line 3, in f\n'
    "    g()\nRuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function. "
    "This is not supported at the moment.\n"
)


def test_the_shipped_evidence_is_what_the_stores_say():
    assert not evidence.stale(), "stale: run python -m harness evidence"


def test_without_the_stores_the_shipped_counts_are_cited(tmp_path):
    (failure,) = diagnose.failures_in_text(F2_LOG, source="log", torch="2.13.0")
    here = diagnose.diagnose([failure])[0]
    shipped = diagnose.diagnose([failure], records_of=RecordSource(root=tmp_path))[0]
    assert [f.text() for f in shipped.fixes] == [f.text() for f in here.fixes]
    assert shipped.versions == here.versions and any("reproduces" in v for v in here.versions)


@pytest.mark.slow
def test_an_installed_package_diagnoses_from_elsewhere_as_the_checkout_does(tmp_path):
    target, user = tmp_path / "site", tmp_path / "user"
    user.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (user / "log.txt").write_text(F2_LOG)
    env = {**os.environ, "PYTHONPATH": str(target)}

    def diagnose_here(extra_env: dict) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "harness", "diagnose", "log.txt"],
            capture_output=True,
            text=True,
            cwd=user,
            env=extra_env,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        return p.stdout

    installed, checkout = diagnose_here(env), diagnose_here(dict(os.environ))
    where = subprocess.run(
        [sys.executable, "-c", "import harness; print(harness.__file__)"],
        capture_output=True,
        text=True,
        cwd=user,
        env=env,
    ).stdout
    assert where.startswith(str(target)), where
    strip = lambda text: [ln for ln in text.splitlines() if "reproduce:" not in ln]  # noqa: E731
    assert strip(installed) == strip(checkout) and "held, 0/29" in installed
    script = next(ln for ln in installed.splitlines() if "reproduce:" in ln).split(" -- python ")[1].split()[0]
    assert script.startswith(str(target)) and Path(script).is_file(), script
    p = subprocess.run(
        [sys.executable, "-m", "harness", "repro", "r06", "--help"],
        capture_output=True,
        text=True,
        cwd=user,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0 and "usage:" in p.stdout, p.stdout + p.stderr
