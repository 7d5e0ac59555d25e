"""The counts the catalogue cites, shipped inside the package (`evidence.json` beside this module).

diagnose, doctor and the race table quote k/n per race, fix and torch version, read from the result
stores that `races.toml` names. Those stores live in the checkout's `results/`, which a package
installed with pip does not carry: there the same numbers come from this file, regenerated from
the stores by `python -m harness evidence` (a test fails when it is stale). A store that is present
is always read itself; an evidence entry the file lacks is "no record", never "0/0".
"""

from __future__ import annotations

import json

from harness.diagnosis.catalogue import (
    EVIDENCE_PATH,
    Catalogue,
    Evidence,
    Race,
    RecordSource,
    count,
    evidence_key,
    load,
)


def cited(catalogue: Catalogue) -> list[tuple[Evidence, Race]]:
    """Every (store cells, race) pair the catalogue's readers count: fixes, versions, version fix cells."""
    pairs: list[tuple[Evidence, Race]] = []
    for race in catalogue.races:
        pairs += [(f, race) for f in race.fixes if f.store]
        for v in race.versions:
            if v.store:
                pairs.append((v, race))
                if v.fix_cells:
                    pairs.append((Evidence(store=v.store, cells=v.fix_cells), race))
    return pairs


def build(catalogue: Catalogue | None = None, records_of: RecordSource | None = None) -> dict:
    """The file's content, counted from the stores now."""
    catalogue = catalogue or load()
    records_of = records_of or RecordSource()
    present = [(e, race) for e, race in cited(catalogue) if records_of.exists(e.store)]
    counts = {}
    for evidence, race in present:
        c = count(evidence, race, records_of)
        counts[evidence_key(evidence, race)] = [c.k, c.n, c.failed, list(c.torch)]
    stores = sorted({e.store for e, _ in present})
    return {
        "about": "k/n per race and store cells, counted from these stores by `python -m harness evidence`",
        "stores": stores,
        "counts": dict(sorted(counts.items())),
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def write(data: dict) -> None:
    """Replace the shipped file atomically (never a half-written file)."""
    tmp = EVIDENCE_PATH.with_suffix(".json.tmp")
    tmp.write_text(render(data))
    tmp.replace(EVIDENCE_PATH)


def stale() -> bool:
    """Whether the shipped file differs from what the stores say now."""
    return not EVIDENCE_PATH.is_file() or EVIDENCE_PATH.read_text() != render(build())
