"""Failure families: which known failure mode a signature belongs to (the catalogue's F1..F14,
G1/G2, r19, ...: docs/glossary.md), read from its one-line summary.

A signature key says "these trials failed the same way"; a family says which documented bug that
way is, so that a table can read "F1 2/2" instead of a 140-character assertion path, and so that
one mode reached by several paths (F1 from the forward and from the backward; a capture error
met in five stacks) reads as one. ClusterFuzz does the same with its crash categories. The first
rule that matches wins; no match is `other`: a new way to fail, worth a look.
"""

from __future__ import annotations

from harness.diagnosis.catalogue import load

# (family, regex over the signature summary, what it is), in matching order: the catalogue's races
# (harness/diagnosis/races.toml, the one place a family's patterns are written).
_CATALOGUE = load()
FAMILIES: tuple[tuple[str, str, str], ...] = tuple((r.id, r.pattern, r.title) for r in _CATALOGUE.races)
DESCRIPTIONS = {name: what for name, _, what in FAMILIES}
PATTERNS = {name: pattern for name, pattern, _ in FAMILIES}
"""A family's regex, for checks that name a failure by its family (tests/race/catalogue.py)."""
ORDER = (*DESCRIPTIONS, "other", "?")
"""Every family `family()` can return, in table order."""


def family(summary: str | None) -> str:
    """The family of a signature summary; `other` when no rule matches, `?` without a summary
    (Catalogue.family: a failure's own part before its `; then` aftermath)."""
    return _CATALOGUE.family(summary)
