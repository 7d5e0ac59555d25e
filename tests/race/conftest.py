"""The race suite's last word: which rows were checked against a record of the installed torch and
which against another torch's (a row with no record for it says so, rather than passing as if
measured here). tests/conftest.py prints it: under pytest-xdist only the top conftest reaches the
controller, which writes the summary."""

from __future__ import annotations

from tests.race import catalogue


def coverage_lines(version: str) -> list[str]:
    """Rows checked against this torch's record and rows with none, for `version`."""
    here = catalogue.major_minor(version)
    ours, other = [], []
    for rows in (catalogue.CPU, catalogue.GPU):
        for race in rows.values():
            row = catalogue.installed(race, version)
            (ours if catalogue.major_minor(row.torch) == here else other).append((race.id, row))
    lines = [
        f"race rows on torch {version}: {len(ours)} checked against a record of torch {here}"
        + (f" ({', '.join(i for i, _ in ours)})" if ours else "")
    ]
    hints = {
        "CPU": "`python -m harness matrix --preset versions-cpu` records them",
        "GPU": "`python -m harness matrix --preset gpu-repros` on a GPU host records them",
    }
    for device in ("CPU", "GPU"):
        by: dict[str, list[str]] = {}
        for i, row in other:
            if row.device == device:
                by.setdefault(row.torch, []).append(i)
        if by:
            lines.append(
                f"{device} rows with no record for torch {here}, checked against another torch's: "
                + "; ".join(f"{', '.join(ids)} (recorded on {t})" for t, ids in sorted(by.items()))
                + f"; {hints[device]}"
            )
    return lines
