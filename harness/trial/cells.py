"""Cell and trial names: `workload:strategy@plan` and `<matrix>/<cell>/<index>`.

One module builds them (harness.campaign.matrix.expand). A trial's record carries the parts as fields
(`TrialResult.workload`, `strategy`, `fixes`, `plan`), so readers read fields, not names; the
names are split here only where a record gets them: by the runner, for the cell it was given, and
by `TrialResult.from_json`, for a record stored before the fields existed. A name of another shape
(a stress run's `stress`, a race-suite cell without a plan) reads as all workload, with no plan
(`-`).
"""

from __future__ import annotations

NO_PLAN = "-"
"""The plan part of a cell run without a fault plan."""
MODIFIERS = ("raw", "eager", "no-cudagraphs")
"""Strategy parts that are not registry fixes: the unfixed baseline, and how the workload compiles."""


def cell_name(workload: str, strategy: str, plan: str) -> str:
    return f"{workload}:{strategy}@{plan}"


def split_cell(cell: str) -> tuple[str, str, str]:
    """`workload:strategy@plan` -> parts; a name of another shape is all workload."""
    workload, _, rest = cell.partition(":")
    strategy, _, plan = rest.rpartition("@") if "@" in rest else (rest, "", NO_PLAN)
    return workload, strategy, plan or NO_PLAN


def strategy_parts(strategy: str) -> list[str]:
    """A strategy name's parts: fixes and MODIFIERS joined by `+` (`raw`, `global-lock+eager`).
    The one reading of strategy names; `strategy_name` is the one writing."""
    return [part for part in strategy.split("+") if part]


def strategy_name(fixes: tuple[str, ...] | list[str]) -> str:
    """The strategy that runs `fixes` and nothing else: their names joined by `+`, `raw` for none."""
    return "+".join(fixes) or "raw"


def fixes_of(strategy: str) -> list[str]:
    """The fixes a strategy ran: its parts other than MODIFIERS (every stored strategy is registry
    fixes and these)."""
    return [part for part in strategy_parts(strategy) if part not in MODIFIERS]


def trial_id(matrix: str, cell: str, index: int) -> str:
    return f"{matrix}/{cell}/{index}"
