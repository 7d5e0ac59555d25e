"""Cell and trial names: `workload:strategy@plan` and `<matrix>/<cell>/<index>`.

One module builds them (harness.campaign.expand) and every reader parses them (report, crosstab,
diagnosis), so the two sides cannot drift apart: a name of another shape (a stress run's
`stress`, a race-suite cell without a plan) reads as all workload, with no plan (`-`).
"""

from __future__ import annotations

NO_PLAN = "-"
"""The plan part of a cell run without a fault plan."""


def cell_name(workload: str, strategy: str, plan: str) -> str:
    return f"{workload}:{strategy}@{plan}"


def split_cell(cell: str) -> tuple[str, str, str]:
    """`workload:strategy@plan` -> parts; a name of another shape is all workload."""
    workload, _, rest = cell.partition(":")
    strategy, _, plan = rest.rpartition("@") if "@" in rest else (rest, "", NO_PLAN)
    return workload, strategy, plan or NO_PLAN


def strategy_of(cell: str) -> str:
    """The strategy part ('' for a name without one)."""
    return split_cell(cell)[1] if ":" in cell else ""


def trial_id(matrix: str, cell: str, index: int) -> str:
    return f"{matrix}/{cell}/{index}"
