"""`hunt.jsonl`: one JSON line per finished run of a hunt, the hunt's own folder's index.

The first line holds what the runs measured (`{"hunt": {...}}`: the pytest arguments, threads,
plan and fix sets); each later line is one finished run (`RunRecord.to_json`). A hunt started
again with the same `-o` reads the finished runs back and runs only the others; a folder that
holds a hunt of other arguments is refused. A line cut short by a kill is skipped.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.runtime.errors import UserInputError

RECORDS = "hunt.jsonl"
ONE_THREAD, ALONE = -1, -2
"""Run numbers of the reruns: with one thread; the first test run alone (then -3, -4, ...)."""


class HuntFolderError(UserInputError):
    """An -o folder that holds another hunt's runs."""


@dataclass(frozen=True, slots=True)
class HuntKey:
    """What a hunt's runs measured: a resumed hunt must measure the same."""

    pytest_args: tuple[str, ...]
    threads: int
    plan: str | None
    fix_sets: tuple[tuple[str, ...] | None, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "pytest_args": list(self.pytest_args),
            "threads": self.threads,
            "plan": self.plan,
            "fix_sets": [None if f is None else list(f) for f in self.fix_sets],
        }


@dataclass(frozen=True, slots=True)
class TestRecord:
    """One test of one run: its outcome and the races its failure text named."""

    id: str
    outcome: str
    threads: int
    single_reason: str = ""
    message: str = ""
    races: tuple[str, ...] = ()
    collected: bool = True


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished pytest run: how the process ended and its tests (None: it wrote no report)."""

    run: int
    """The run's number over all arms (its folder's name); -1 for the rerun with one thread, -2 - k
    for the k-th rerun of one test alone with the hunt's threads."""
    arm: int
    seed: int
    outcome: str
    rc: int | None
    detail: str
    duration_s: float
    folder: str
    tests: tuple[TestRecord, ...] | None
    races: tuple[str, ...] = ()
    """Races the run's own folder named (a crash or hang outside pytest's report)."""
    parts: int = 1
    """Processes the run took: one more after each test that crashed its process."""

    @property
    def rerun(self) -> bool:
        """A rerun, with one thread or alone: not one of the suite's runs."""
        return self.run < 0

    @property
    def alone(self) -> bool:
        return self.run <= ALONE

    @property
    def part_folders(self) -> tuple[str, ...]:
        """The folders of its processes, in order (`run-<i>`, then `run-<i>-part<k>`)."""
        return (self.folder, *(f"{self.folder}-part{k}" for k in range(2, self.parts + 1)))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunRecord:
        tests = obj.get("tests")
        fields = {**obj, "races": tuple(obj.get("races") or ())}
        fields["tests"] = None if tests is None else tuple(_test(t) for t in tests)
        return cls(**fields)


def _test(obj: dict[str, Any]) -> TestRecord:
    return TestRecord(**{**obj, "races": tuple(obj.get("races") or ())})


class RecordLog:
    """The hunt.jsonl of one folder: read once, appended to under a lock, a line per write."""

    def __init__(self, out_dir: Path, key: HuntKey) -> None:
        self.path = out_dir / RECORDS
        self.key = key
        self.lock = threading.Lock()

    def load(self) -> list[RunRecord]:
        """The finished runs; writes the header into a new folder."""
        if not self.path.is_file():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"hunt": self.key.to_json()})
            return []
        text = self.path.read_text(encoding="utf-8")
        lines = [_parse(line) for line in text.splitlines()]
        lines = [obj for obj in lines if obj is not None]
        head = lines[0].get("hunt") if lines else None
        if head != self.key.to_json() and not any("run" in obj for obj in lines):
            self.path.unlink()  # a header alone: no run of those arguments to keep
            return self.load()
        if head != self.key.to_json():
            raise HuntFolderError(
                f"{self.path.parent} holds a hunt of other arguments ({json.dumps(head)}); give another -o"
            )
        if not text.endswith("\n"):
            with self.path.open("a", encoding="utf-8") as f:
                f.write("\n")  # ends the line a kill cut short: the next record starts its own
        return [RunRecord.from_json(obj) for obj in lines[1:] if "run" in obj]

    def append(self, record: RunRecord) -> None:
        self._write(record.to_json())

    def _write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj) + "\n"
        with self.lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)


def _parse(line: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def read_key(folder: Path) -> HuntKey | None:
    """The arguments a hunt folder's runs measured, from its header line; None where it has none."""
    try:
        with (folder / RECORDS).open(encoding="utf-8") as f:
            head = (_parse(f.readline()) or {}).get("hunt")
        return HuntKey(
            pytest_args=tuple(head["pytest_args"]),
            threads=int(head["threads"]),
            plan=head.get("plan"),
            fix_sets=tuple(None if x is None else tuple(x) for x in head["fix_sets"]),
        )
    except (OSError, TypeError, KeyError, ValueError, AttributeError):
        return None
