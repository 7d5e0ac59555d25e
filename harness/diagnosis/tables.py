"""The catalogue as markdown: REPORT.md's race table and repro/README.md's suite rows.

Both are generated blocks (`python -m harness report` rewrites them), so a count in them is the
store's at the time of the report and a race added to races.toml appears in both; a test holds the
committed blocks to what this module makes of the catalogue and the stores.
"""

from __future__ import annotations

from harness.diagnosis.catalogue import NOT_RACE_KINDS, Catalogue, RecordSource, count, load, major_minor

RACES_BLOCK = "race-catalogue"
REPROS_BLOCK = "repro-rows"


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def race_table(catalogue: Catalogue | None = None, records_of: RecordSource | None = None) -> str:
    """One row per catalogued race: what it is, CUDA or not, its repros, where it was seen per
    torch, and each fix with its k/n (k = trials failing as this race) and torch."""
    catalogue = catalogue or load()
    records_of = records_of or RecordSource()
    rows = [
        "#### The race catalogue (harness/diagnosis/races.toml)",
        "",
        "Regenerate with `python -m harness report`. Every count is read from the store and cells "
        "named in `harness/diagnosis/races.toml` (k = failing trials of that race, n = counted trials); "
        "`python -m harness diagnose` matches failures against the same rows. Generic rows (native "
        "crashes, hangs) are classes of failure, not races; what is named so as not to be read as one (a "
        "test's own state, the recompile limit) is in docs/glossary.md.",
        "",
        "| race | what | kind | CUDA | repros | seen, per torch | fixes: k/n (torch) |",
        "|---|---|---|---|---|---|---|",
    ]
    for race in (r for r in catalogue.races if r.kind not in NOT_RACE_KINDS):
        seen = []
        for v in race.versions:
            c = count(v, race, records_of)
            seen.append(f"{v.torch}: {c.k}/{c.n}" if c is not None else f"{v.torch}: {v.note.split(':')[0]}")
        fixes = []
        for f in race.fixes:
            c = count(f, race, records_of)
            if c is None:
                fixes.append(f"`{f.name}` (note)")
            else:
                torch = ",".join(sorted({major_minor(t) for t in c.torch})) or "-"
                fixes.append(f"`{f.name}` {c.k}/{c.n} ({torch})")
        rows.append(
            f"| {race.id} | {_esc(race.title)} | {race.kind} | {'yes' if race.needs_cuda else 'no'} "
            f"| {', '.join(race.repros) or '-'} | {'; '.join(seen) or '-'} | {'; '.join(fixes) or '-'} |"
        )
    return "\n".join(rows)


def repro_table(catalogue: Catalogue | None = None) -> str:
    """The race suite's rows as `pytest -k race` checks them (catalogue `[[repro]]`)."""
    catalogue = catalogue or load()
    rows = [
        "Generated from `harness/diagnosis/races.toml` by `python -m harness report`; "
        "`tests/race/test_catalogue_store.py` holds every count to its store.",
        "",
        "| id | race | device | torch | store | plan | raw under plan | raw plain | expect | fix | fix under plan | fix trials per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in catalogue.repros:
        races = ", ".join(x.id for x in catalogue.races_of_repro(r.id)) or "-"
        fix = r.fix or (" ".join(r.fix_args) if r.fix_args else "-")
        pair = lambda p: f"{p[0]}/{p[1]}" if p else "-"  # noqa: E731
        rows.append(
            f"| {r.id} | {races} | {r.device} | {r.torch} | {r.store} | {r.plan or '-'} | {pair(r.recorded)} "
            f"| {pair(r.recorded_plain)} | {r.expect} | {fix} | {pair(r.fix_recorded)} "
            f"| {r.fix_trials if (r.fix or r.fix_args) else '-'} |"
        )
    return "\n".join(rows)
