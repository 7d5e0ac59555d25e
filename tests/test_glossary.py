"""docs/glossary.md defines every id and fix name a reader meets: its generated tables are what
the catalogue, the repro scripts and the fix registry say now, and every race id the docs use has
an entry."""

from __future__ import annotations

import re
from pathlib import Path

from harness.cli import main
from harness.diagnosis import glossary
from harness.diagnosis.catalogue import load
from harness.runtime.fixes import FIXES

ROOT = Path(__file__).resolve().parents[1]
TEXT = glossary.GLOSSARY.read_text(encoding="utf-8")
DOCS = [
    ROOT / "README.md",
    ROOT / "REPORT.md",
    ROOT / "repro" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "findings").glob("*.md")),
    *sorted((ROOT / "docs" / "log").glob("*.md")),
]
RACE_ID = re.compile(r"\b(F\d{1,2}[a-d]?|R\d|G\d|r\d\d)\b")
"""The catalogue's numbered ids (F-, R-, G-ids) and the repros' (rNN)."""


def _block(text: str, name: str) -> str:
    start = text.index(f"<!-- harness:begin {name} -->\n") + len(f"<!-- harness:begin {name} -->\n")
    return text[start : text.index(f"<!-- harness:end {name} -->")].strip()


def _defined() -> set[str]:
    """The first cell of every table row: the ids and names the glossary defines."""
    return {m.group(1).strip("` ") for m in re.finditer(r"^\| ([^|]+) \|", TEXT, flags=re.MULTILINE)}


def test_the_generated_tables_are_what_the_catalogue_the_repros_and_the_registry_say():
    for name, body in glossary.blocks().items():
        assert _block(TEXT, name) == body.strip(), f"{name} is stale: run python -m harness glossary"


def test_the_command_says_whether_the_glossary_is_stale(tmp_path, capsys):
    assert main(["glossary", "--check"]) == 0
    stale = tmp_path / "glossary.md"
    stale.write_text(TEXT.replace("| `global-lock` |", "| `old-lock` |"), encoding="utf-8")
    assert main(["glossary", "--check", "--out", str(stale)]) == 1
    assert main(["glossary", "--out", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == TEXT
    assert "up to date" in capsys.readouterr().out.splitlines()[0]


def test_every_race_alias_fix_and_target_has_an_entry():
    defined = _defined()
    catalogue = load()
    races = {r.id for r in catalogue.races}
    aliases = {a for r in catalogue.races for a in r.aliases}
    assert not races & aliases, "an alias is also a race id"
    missing = sorted((races | aliases | set(FIXES) | {t for f in FIXES.values() for t in f.targets}) - defined)
    assert not missing, f"not in docs/glossary.md: {missing}"


def test_every_race_and_repro_id_the_docs_use_has_an_entry():
    defined = _defined()
    used = {}
    for doc in DOCS:
        for found in RACE_ID.findall(doc.read_text(encoding="utf-8")):
            used.setdefault(found, doc.relative_to(ROOT).as_posix())
    missing = {i: where for i, where in sorted(used.items()) if i not in defined}
    assert not missing, f"ids the docs use that docs/glossary.md does not define (id: first doc): {missing}"


def test_report_links_the_glossary_before_its_first_race_id():
    report = (ROOT / "REPORT.md").read_text(encoding="utf-8")
    link = report.index("](docs/glossary.md)")
    first = RACE_ID.search(report)
    assert first is not None and link < first.start(), first
