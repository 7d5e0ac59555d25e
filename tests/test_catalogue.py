"""The catalogue file (harness/diagnosis/races.toml) and everything that reads it agree: the fixes
it names exist, its store cells hold trials, its repros exist, the generated tables in REPORT.md
and repro/README.md are what it makes, and repro/README.md's hand-written CPU table quotes its
counts. A malformed catalogue is one clear error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.analysis.report import begin_marker, end_marker
from harness.diagnosis import families, tables
from harness.diagnosis.catalogue import CatalogueError, RecordSource, count, load, parse
from harness.runtime.fixes import FIXES

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN_TOKENS = {"no-cudagraphs", "eager"}
"""Strategy parts of the campaign presets that are compile settings, not registry fixes."""


def _block(text: str, name: str) -> str:
    return text[text.index(begin_marker(name)) + len(begin_marker(name)) : text.index(end_marker(name))].strip()


def test_every_fix_the_catalogue_names_is_in_the_registry():
    for race in load().races:
        for fix in race.fixes:
            if fix.name.startswith("--"):
                assert fix.store is None, f"{race.id}: a script argument has no runner cell"
                continue
            unknown = set(fix.name.split("+")) - set(FIXES) - CAMPAIGN_TOKENS
            assert not unknown, f"{race.id}: {sorted(unknown)} not in harness.runtime.fixes.FIXES"
    for row in load().repros:
        if row.fix:
            assert set(row.fix.split("+")) <= set(FIXES), row.id


def test_every_store_cell_the_catalogue_names_holds_trials():
    """A glob that matches nothing is evidence that says nothing (a renamed cell, a retired store)."""
    records_of = RecordSource()
    for race in load().races:
        for e in (*race.fixes, *race.versions):
            if e.store is None:
                assert e.note, f"{race.id}: evidence with neither cells nor a note"
                continue
            assert records_of.exists(e.store), f"{race.id}: no store {e.store}"
            c = count(e, race, records_of)
            assert c.n > 0, f"{race.id}: {e.store} {e.cells} holds no counted trial"


def test_every_repro_script_is_catalogued_and_every_catalogued_repro_exists():
    scripts = {p.name.split("_")[0] for p in (ROOT / "repro").glob("r[0-9][0-9]_*.py")}
    named = {rid for race in load().races for rid in race.repros}
    assert named == scripts
    for row in load().repros:
        assert (ROOT / "repro" / f"{row.script}.py").is_file(), row.script


def test_families_are_the_catalogues_races_in_order():
    assert [name for name, _, _ in families.FAMILIES] == [r.id for r in load().races]
    assert families.family("AssertionError in x at torch._inductor.cudagraph_trees:get_obj") == "F1"
    assert families.family("something else") == "other" and families.family(None) == "?"


def test_the_generated_blocks_are_what_the_catalogue_makes():
    readme = (ROOT / "repro" / "README.md").read_text()
    assert _block(readme, tables.REPROS_BLOCK) == tables.repro_table().strip(), (
        "repro/README.md's suite rows are stale: run `python -m harness report` and commit"
    )
    page = (ROOT / "docs" / "findings" / "catalogue.md").read_text()
    assert _block(page, tables.RACES_BLOCK) == tables.race_table().strip(), (
        "docs/findings/catalogue.md's race catalogue is stale: run `python -m harness report` and commit"
    )


def test_the_hand_written_cpu_table_quotes_the_catalogues_counts():
    """repro/README.md's CPU table (symptoms in prose) carries the same plain and stressed k/n."""
    readme = (ROOT / "repro" / "README.md").read_text()
    rows = {r.id: r for r in load().repros if r.device == "CPU" and r.on_torch is None}
    seen = set()
    start = readme.index("| id | mode | symptom (signature family) |")
    table = readme[start : readme.index("\n\n", start)]
    for line in table.splitlines():
        m = re.match(r"\| (r\d\d)_\w+ \|", line)
        if not m or m.group(1) not in rows:
            continue
        cols = [c.strip() for c in line.strip("|").split("|")]
        row = rows[m.group(1)]
        assert cols[5].startswith(f"{row.recorded_plain[0]}/{row.recorded_plain[1]} "), (row.id, cols[5])
        assert cols[6].startswith(f"{row.recorded[0]}/{row.recorded[1]} "), (row.id, cols[6])
        if row.fix:
            assert f"{row.fix} {row.fix_recorded[0]}/{row.fix_recorded[1]}" in cols[7], (row.id, cols[7])
        seen.add(row.id)
    assert seen == set(rows)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["("]\n', "bad summary regex"),
        ('[[race]]\nid = "x"\ntitle = "t"\nkind = "nope"\nsummary = ["a"]\n', "kind must be one of"),
        ('[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["a"]\ncolour = 1\n', "unknown keys"),
        (
            '[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["a"]\n[[race.fixes]]\nname = "f"\n',
            "neither store cells nor a note",
        ),
        (
            '[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["a"]\n'
            '[[repro]]\nid = "r1"\nscript = "s"\ndevice = "CPU"\nfamily = "{nope}"\nrecorded = [1, 1]\n'
            'torch = "t"\nstore = "s"\n',
            "unknown race 'nope'",
        ),
        ('[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\ncrash_sites = ["("]\n', "bad crash_sites regex"),
        (
            '[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["a"]\n[[race.fixes]]\nname = "f"\n'
            'note = "n"\ncolour = 1\n',
            "unknown keys ['colour']",
        ),
        (
            '[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\nsummary = ["a"]\n[[race.fixes]]\nname = "f"\n'
            'note = "n"\nleaves = ["("]\n',
            "bad leaves regex",
        ),
        ('[[race]]\nid = "x"\n', "kind must be one of"),
        ("not toml = = 1", "catalogue:"),
    ],
)
def test_a_malformed_catalogue_is_one_clear_error(text, message):
    with pytest.raises(CatalogueError, match=re.escape(message)):
        parse(text)


def test_every_probe_the_catalogue_names_is_a_doctor_probe():
    from harness.diagnosis import probes

    keys = {p.key for p in probes.PROBES}
    for race in load().races:
        if race.probe is not None:
            assert race.probe.lstrip("!") in keys, f"{race.id}: no doctor probe {race.probe!r}"


def test_a_race_is_named_by_any_crash_site_of_its_family():
    """crash_sites: each is a summary pattern `<signal> at <site>`, so a native crash landing in
    any of them names the race (R5 at compile_wrapper or guards:invalidate, any signal)."""
    cat = parse(
        '[[race]]\nid = "x"\ntitle = "t"\nkind = "race"\ncrash_sites = ["a\\\\.b:c", "d:e"]\n'
        '[[race]]\nid = "segv"\ntitle = "t"\nkind = "generic"\nsummary = ["Segmentation fault"]\n'
    )
    assert cat.family("Segmentation fault at a.b:c") == "x" and cat.family("Floating point exception at d:e") == "x"
    assert cat.family("Segmentation fault at f:g") == "segv"
    r5 = load().race("R5")
    for site in ("torch._dynamo.eval_frame:compile_wrapper", "torch._dynamo.guards:invalidate"):
        for signal in ("Segmentation fault", "Floating point exception", "Aborted"):
            assert families.family(f"{signal} at {site}") == "R5"
    assert len(r5.crash_sites) >= 2 and len(r5.native) >= 4


def test_fix_edits_and_leaves_are_where_the_evidence_says():
    """dict-mutation's global-lock was measured with the mutator under the lock (an edit); F14's
    nested-fx-fallback sets one override, not the recompile limit (it leaves that face)."""
    dm = {f.name: f for f in load().race("dict-mutation").fixes}
    assert dm["global-lock"].edit
    f14 = {f.name: f for f in load().race("F14").fixes}
    assert any(re.search(p, "hit config.recompile_limit (8)") for p in f14["nested-fx-fallback"].leaves)
    assert load().race("F14").warnings_alone and load().race("F14").context
