"""harness.trial.folder owns a trial folder's artefact names: no other module spells one."""

from __future__ import annotations

import re
from pathlib import Path

from harness.trial import folder
from harness.trial.folder import TrialFolder

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
    tf = TrialFolder(tmp_path)
    for name in folder.FILES:
        (tmp_path / name).write_text("old")
    (tmp_path / "kept.txt").write_text("not an artefact")
    tf.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    tf.write_json(tf.result, {"outcome": "ok"})
    assert tf.has_result() and tf.read_json(tf.result) == {"outcome": "ok"}
    assert TrialFolder.text(tf.output) is None
    tf.output.write_text("line\n")
    assert TrialFolder.text(tf.output) == "line\n"
