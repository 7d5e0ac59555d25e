"""Functions a reader can hold, in the project's own code (harness/, dflash/): none longer than
LONGEST lines, and at most OVER_50 longer than 50. ruff's C901, PLR0912 and PLR0915 (pyproject.toml)
bound branches and statements; a long function of plain calls passes those, so length is checked
here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 70
OVER_50 = 5


def _lengths() -> list[tuple[int, str]]:
    out = []
    for package in ("harness", "dflash"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    out.append((node.end_lineno - node.lineno + 1, where))
    return sorted(out, reverse=True)


def test_no_function_is_longer_than_a_reader_can_hold():
    lengths = _lengths()
    assert len(lengths) > 1000, "the walk found the project's functions"
    assert [w for n, w in lengths if n > LONGEST] == [], f"longer than {LONGEST} lines"
    over_50 = [f"{w} ({n})" for n, w in lengths if n > 50]
    assert len(over_50) <= OVER_50, over_50
