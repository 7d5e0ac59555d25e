"""A named race's evidence besides its fixes: its verdict on each torch it was measured on, and the
repro commands that reproduce it."""

from __future__ import annotations

from pathlib import Path

from harness.diagnosis.catalogue import Catalogue, Evidence, Race, RecordSource, VersionEvidence, count

_REPRO_DIR = Path(__file__).resolve().parents[2] / "repro"
"""The checkout's repro/, or the one an installed package carries beside harness/."""


def _script_path(script: str) -> str:
    """The script as a user types it from here: relative inside the current folder, else absolute
    (an installed package's scripts live in site-packages)."""
    path = _REPRO_DIR / f"{script}.py"
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def repro_commands(race: Race, catalogue: Catalogue) -> list[str]:
    rows = {r.id: r for r in catalogue.repros if r.on_torch is None}
    out = []
    for rid in race.repros:
        row = rows.get(rid)
        script = row.script if row else next((p.stem for p in sorted(_REPRO_DIR.glob(f"{rid}_*.py"))), rid)
        plan = f" --plan {row.plan}" if row and row.plan else ""
        args = "".join(f" {a}" for a in row.args) if row else ""
        out.append(f"python -m harness stress -p 2 --max-runs 10{plan} -- python {_script_path(script)}{args}")
    return out


def version_verdict(race: Race, v: VersionEvidence, records_of: RecordSource) -> str:
    """One torch's verdict: measured (k/n of the race, and its fixes' failures) or the source's word."""
    c = count(v, race, records_of)
    seen = ""
    if c is not None and not c.n:
        seen = f"no record ({v.where()} holds no trials here)"
    elif c is not None:
        seen = f"{'reproduces' if c.k else 'not reproduced'} {c.k}/{c.n}"
        # The fix cells counted as any cells are; any failure there (Count.failed) counts against it.
        f = count(Evidence(store=v.store, cells=v.fix_cells), race, records_of) if v.fix_cells else None
        if f is not None and f.n:
            # Where the race is gone a fix can only be unneeded or, failing, harmful.
            word = (
                ("fix holds" if c.k else "fix no longer needed")
                if f.failed == 0
                else ("fix fails" if c.k else "fix now harmful")
            )
            seen += f", {word} ({f.failed}/{f.n} failed)"
        seen += f" ({v.where()}{'; ' + ', '.join(v.fix_cells) if v.fix_cells else ''})"
    return "; ".join(x for x in (seen, v.note) if x)


def version_lines(race: Race, records_of: RecordSource) -> list[str]:
    """Per torch: where the race was seen (k/n now) or what the source says."""
    return [f"torch {v.torch}: {version_verdict(race, v, records_of)}" for v in race.versions]
