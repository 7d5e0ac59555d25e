"""results/ holds data only: stores, logs, bench records and plots.

Code that lived there (the GPU host's run script, its unpacker, the per-run figures) was tested
and imported from a data folder, with sys.path hacks to reach the harness; it now lives in tools/.
Matrix spec files are presets in harness/campaign/specs/. A script or spec put back under results/
fails here, before it is committed (untracked files count too, unless ignored).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = (".py", ".sh")


def _listed(*args: str) -> list[str]:
    proc = subprocess.run(
        ["git", "ls-files", "-z", *args, "--", "results"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    return [p for p in proc.stdout.split("\0") if p]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_no_code_is_kept_under_results():
    code = [p for p in _listed("--cached", "--others", "--exclude-standard") if p.endswith(CODE)]
    assert not code, f"code under results/ (move it to tools/): {code}"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_no_matrix_spec_is_kept_under_results():
    specs = []
    for rel in _listed("--cached", "--others", "--exclude-standard"):
        if rel.endswith(".json") and "/artefacts/" not in rel and (ROOT / rel).stat().st_size < 1_000_000:
            data = json.loads((ROOT / rel).read_text(encoding="utf-8"))
            if isinstance(data, dict) and "workloads" in data:
                specs.append(rel)
    assert not specs, f"matrix specs under results/ (make them presets in harness/campaign/specs/): {specs}"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_data_files_the_device_scripts_name_are_in_results():
    # tools/h200_run.sh reads the corpora it starts from in the checkout it runs in, and
    # unpack_run.sh appends to the bench records: data, in results/.
    tracked = set(_listed("--cached"))
    named = {
        m
        for sh in ("h200_run.sh", "unpack_run.sh")
        for m in re.findall(r"results/[\w./-]+", (ROOT / "tools" / sh).read_text())
        if m.endswith((".json", ".jsonl", ".tgz"))
    }
    assert "results/h200-campaign/corpora.tgz" in named
    assert not named - tracked, sorted(named - tracked)
