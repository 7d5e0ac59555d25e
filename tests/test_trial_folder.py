"""harness.trial.folder owns a trial folder's artefact names: no other module spells one."""

from __future__ import annotations

import re
from pathlib import Path

from harness.trial import folder

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_but_the_folder_module_names_an_artefact_file():
    quoted = re.compile("|".join(re.escape(f'"{name}"') for name in folder.FILES))
    spelled = [
        f"{p.relative_to(ROOT)}:{n}"
        for package in ("harness", "tools", "repro")
        for p in sorted((ROOT / package).rglob("*.py"))
        if p.name != "folder.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if quoted.search(line)
    ]
    assert spelled == []


def test_a_folder_is_cleared_written_and_read(tmp_path):
    for name in folder.FILES:
        (tmp_path / name).write_text("old")
    (tmp_path / "kept.txt").write_text("not an artefact")
    folder.clear(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    folder.write_json(tmp_path / folder.RESULT, {"outcome": "ok"})
    assert (tmp_path / folder.RESULT).read_text() == '{\n  "outcome": "ok"\n}\n'
    assert folder.text(tmp_path / folder.OUTPUT) is None  # the trial left none
    (tmp_path / folder.OUTPUT).write_bytes(b"line \xff\n")
    assert folder.text(tmp_path / folder.OUTPUT) == "line \ufffd\n"  # undecodable bytes do not raise
