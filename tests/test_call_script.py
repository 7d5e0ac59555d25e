"""results/h200-campaign/call.sh: whatever happens, a call packs its logs into $OUT in time.

The H200 calls of 2026-11-29 lost a whole store once because the script overran its budget
before packing (a bare `wait` also waited for the `tee` behind `exec >`). Here a call with an
unknown phase must end at once and still leave log.txt and call.tgz.
"""

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "results" / "h200-campaign" / "call.sh"


def test_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_a_call_packs_its_outputs_even_when_nothing_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(["bash", str(SCRIPT), "30", "no-such-phase"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    log = (out / "log.txt").read_text()
    assert "unknown phase no-such-phase" in log and "== done after" in log
    with tarfile.open(out / "call.tgz") as tgz:
        assert any(name.startswith("x") for name in tgz.getnames())
