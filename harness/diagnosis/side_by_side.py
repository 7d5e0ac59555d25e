"""What a `harness stress` folder says beyond its runs: the command and the options its failures
were seen under, each fix set's k/n, and the stop's verdict (`stress.json`, written by stress
beside the runs). Read back, it gives `diagnose FOLDER` the verdict stress printed, and the verdict
on the fixes that only the user's own side by side can give: held, did not hold, or no verdict at
all where the raw set never failed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import stats

STRESS_RECORD = "stress.json"


def arm_name(fixes: tuple[str, ...] | None) -> str:
    """A fix set as the user gave it: `as is` (no guard), `none` (`--fix none`), or its fixes."""
    return "as is" if fixes is None else ",".join(fixes) or "none"


@dataclass(frozen=True, slots=True)
class ArmCount:
    """One fix set's runs (stress's, or one test's in a hunt): `fixes` None as is, () `--fix none`."""

    fixes: tuple[str, ...] | None
    failed: int
    runs: int
    races: dict[str, int] = field(default_factory=dict, hash=False)

    @property
    def name(self) -> str:
        return arm_name(self.fixes)

    @property
    def raw(self) -> bool:
        return not self.fixes

    @property
    def wilson(self) -> stats.Interval:
        return stats.wilson(self.failed, self.runs)


def _raw(arms: Sequence[ArmCount]) -> ArmCount | None:
    return next((a for a in arms if a.raw), None)


@dataclass(frozen=True, slots=True)
class StressRecord:
    command: tuple[str, ...]
    options: tuple[str, ...] = ()
    """The stress options the runs had that shape what fails (`--plan switch`, `--timeout 30`)."""
    arms: tuple[ArmCount, ...] = ()
    deterministic: str = ""
    """The stop's verdict: a deterministic failure (or the program's own), else ""."""

    def write(self, folder: Path) -> None:
        data = asdict(self)
        tmp = folder / (STRESS_RECORD + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        tmp.replace(folder / STRESS_RECORD)  # never half-written

    @classmethod
    def read(cls, folder: Path) -> StressRecord | None:
        try:
            data = json.loads((folder / STRESS_RECORD).read_text(encoding="utf-8"))
            arms = tuple(
                ArmCount(
                    fixes=None if a["fixes"] is None else tuple(a["fixes"]),
                    runs=int(a["runs"]),
                    failed=int(a["failed"]),
                    races=dict(a.get("races") or {}),
                )
                for a in data.get("arms") or ()
            )
            return cls(
                command=tuple(data.get("command") or ()),
                options=tuple(data.get("options") or ()),
                arms=arms,
                deterministic=str(data.get("deterministic") or ""),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def arms_verdict(arms: Sequence[ArmCount]) -> list[str]:
    """The fixes' verdict from the user's own side by side, one line each; [] for a single set.
    A fix holds only against a raw set that failed on the same seeds."""
    if len(arms) < 2:
        return []
    raw = _raw(arms)
    if raw is None:
        return ["no verdict on the fixes: no raw set (--fix none) ran beside them"]
    if not raw.failed:
        return [
            f"no verdict on the fixes: {raw.name} did not fail in {raw.runs} runs, so no fix was tried "
            "against a failure (give the plan and options the failures were seen under, or more runs)"
        ]
    lines = []
    for a in (a for a in arms if not a.raw):
        races = ", ".join(f"{r} {n}" for r, n in sorted(a.races.items(), key=lambda kv: -kv[1]))
        if a.runs and not a.failed:
            lines.append(f"held in your runs: {a.name} 0/{a.runs} where {raw.name} failed {raw.failed}/{raw.runs}")
        elif a.failed:
            lines.append(
                f"did not hold in your runs: {a.name} failed {a.failed}/{a.runs}" + (f" ({races})" if races else "")
            )
    return lines


def held(arms: Sequence[ArmCount]) -> list[str]:
    """The fix sets that held in the user's side by side (a raw set failed beside them)."""
    raw = _raw(arms)
    if raw is None or not raw.failed:
        return []
    return [a.name for a in arms if not a.raw and a.runs and not a.failed]


def tried(arms: Sequence[ArmCount]) -> set[str]:
    return {a.name for a in arms if not a.raw}
