"""docs/glossary.md's generated tables: every catalogued race, repro script and registered fix.

A race's id, other ids, kind and title come from harness/diagnosis/races.toml; a repro's line from
the first line of its script's docstring; a fix's from the first paragraph of its docstring in
`harness.runtime.fixes.FIXES`. `python -m harness glossary` writes them between the glossary's markers and
keeps the hand-written terms around them; a test holds the committed blocks to what this module
makes, so a race, repro or fix added without a glossary entry fails it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.diagnosis.catalogue import Catalogue, load
from harness.runtime.fixes import FIXES

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "glossary.md"
REPRO_DIR = ROOT / "repro"
RACES_BLOCK = "glossary-races"
REPROS_BLOCK = "glossary-repros"
FIXES_BLOCK = "glossary-fixes"


def _esc(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def races_table(catalogue: Catalogue | None = None) -> str:
    """One row per catalogued race, in catalogue order: id, its other ids, kind, title, repros."""
    catalogue = catalogue or load()
    rows = ["| id | also called | kind | what | repros | upstream |", "|---|---|---|---|---|---|"]
    for r in catalogue.races:
        rows.append(
            f"| {r.id} | {', '.join(r.aliases) or '-'} | {r.kind} | {_esc(r.title)} "
            f"| {', '.join(r.repros) or '-'} | {_esc(', '.join(r.upstream)) or '-'} |"
        )
    return "\n".join(rows)


def repro_lines(repro_dir: Path = REPRO_DIR) -> list[tuple[str, str, str]]:
    """(id, script, what) per `rNN_*.py`: what is its docstring's first line after `rNN_slug: `."""
    out = []
    for path in sorted(repro_dir.glob("r[0-9][0-9]_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        what = first.split(": ", 1)[1] if first.startswith(f"{path.stem}: ") else first
        out.append((path.stem.split("_", 1)[0], path.name, what))
    return out


def repros_table(catalogue: Catalogue | None = None, repro_dir: Path = REPRO_DIR) -> str:
    """One row per repro script: its id, file, the races whose `repros` name it, and what it shows."""
    catalogue = catalogue or load()
    rows = ["| repro | script | race | what it shows |", "|---|---|---|---|"]
    for rid, script, what in repro_lines(repro_dir):
        races = ", ".join(r.id for r in catalogue.races if rid in r.repros) or "-"
        rows.append(f"| {rid} | [`{script}`](../repro/{script}) | {races} | {_esc(what)} |")
    return "\n".join(rows)


def fix_summary(doc: str | None) -> str:
    """A fix docstring's first paragraph, on one line (its first sentence may wrap)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def fixes_table() -> str:
    """One row per registered fix, in registry order: name, what it does, the ids it targets."""
    rows = ["| fix | what it does | targets |", "|---|---|---|"]
    for name, fix in FIXES.items():
        rows.append(f"| `{name}` | {_esc(fix_summary(type(fix).__doc__))} | {', '.join(fix.targets) or '-'} |")
    return "\n".join(rows)


def blocks(catalogue: Catalogue | None = None) -> dict[str, str]:
    """Every generated block of the glossary, by marker name."""
    catalogue = catalogue or load()
    return {RACES_BLOCK: races_table(catalogue), REPROS_BLOCK: repros_table(catalogue), FIXES_BLOCK: fixes_table()}
