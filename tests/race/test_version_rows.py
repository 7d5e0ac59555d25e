"""The race suite on another torch: a row checks what the catalogue's version evidence measured on the
installed torch's major.minor (results/versions-cpu-torch*), and a row with no record for it says so
at the end of the run instead of passing as if measured there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.diagnosis.catalogue import CatalogueError, parse
from tests.race import catalogue, racecheck
from tests.race.catalogue import CPU, installed
from tests.race.conftest import coverage_lines


def test_a_race_gone_on_a_later_torch_is_checked_as_absent_over_its_record():
    row = installed(CPU["r06"], "2.14.1")
    assert (row.expect, row.recorded, row.repro_cap, row.torch) == ("absent", (0, 10), 10, "2.14.1")
    assert row.source.startswith("results/versions-cpu-torch2.14.1/trials.jsonl cells r06:raw@fx-widen")
    assert row.fix_recorded == (0, 29)  # the store's fix cell, run to 29 trials on 2026-12-02


def test_a_race_still_there_starts_from_that_torchs_rate():
    row = installed(CPU["r16"], "2.15.0")
    assert row.expect == "reproduces" and row.recorded[0] > 0 and row.recorded[1] == 10
    assert row.torch == "2.15.0" and row.fix_recorded == (0, 29)


def test_the_recorded_torch_and_an_unrecorded_one_keep_the_row():
    assert installed(CPU["r06"], "2.13.0+cpu") is CPU["r06"]
    assert installed(CPU["r06"], "2.16.0") is CPU["r06"]
    assert installed(CPU["r22"], "2.11.0+cu130") is catalogue.ON_TORCH[("r22", "2.11")]


def test_the_run_ends_by_naming_the_rows_without_a_record():
    lines = coverage_lines("2.16.0")
    assert lines[0] == "race rows on torch 2.16.0: 0 checked against a record of torch 2.16"
    cpu = ", ".join(CPU)
    assert lines[1].startswith(
        f"CPU rows with no record for torch 2.16, checked against another torch's: {cpu} (recorded on 2.13.0+cpu)"
    )
    on_214 = [i for i in CPU if installed(CPU[i], "2.14.1").torch == "2.14.1"]
    assert {"r06", "r16"} <= set(on_214)
    assert coverage_lines("2.14.1")[0] == (
        f"race rows on torch 2.14.1: {len(on_214)} checked against a record of torch 2.14 ({', '.join(on_214)})"
    )


def test_an_absent_row_is_checked_for_absence(monkeypatch, tmp_path: Path):
    seen = []
    monkeypatch.setattr(racecheck, "check_absent", lambda race, art: seen.append(race.id))
    racecheck.check_reproduces(installed(CPU["r14"], "2.15.0"), tmp_path)
    assert seen == ["r14"]


@pytest.mark.parametrize(
    "extra, message",
    [
        ('fix_cells = ["r06:x@*"]\nnote = "n"\n', "fix_cells need a store"),
        ('store = "s"\ncells = ["c"]\nbogus = 1\n', "unknown keys ['bogus']"),
    ],
)
def test_a_malformed_version_entry_is_one_line_naming_it(extra, message):
    text = (
        f'[[race]]\nid = "X"\ntitle = "t"\nkind = "race"\nsummary = ["x"]\n[[race.versions]]\ntorch = "2.14"\n{extra}'
    )
    with pytest.raises(CatalogueError, match=re.escape(message)):
        parse(text)
