"""One pytest run's progress as the hunt plugin wrote it (`progress.jsonl`): the tests collected,
each test's start and each test's end with its outcome, failure text and threads.

pytest writes its junit report only at the end of the session, so a run that crashes (a segfault
in one test's threads) leaves none. The progress says which tests ended and how, which test was
running when the process died, and which never ran: the hunt names the crash after that test and
runs the rest in a new process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.campaign.hunt.junit import CRASHED, JunitError, JunitTest, read_junit
from harness.campaign.hunt.options import JUNIT

PROGRESS = "progress.jsonl"


@dataclass(frozen=True, slots=True)
class Progress:
    collected: tuple[str, ...]
    done: tuple[JunitTest, ...]
    """Tests that ended, in order, as the junit report would have held them."""
    running: str | None
    """The test that started and never ended (None where none was running)."""
    running_threads: int = 1

    @property
    def never_ran(self) -> tuple[str, ...]:
        """Collected tests that neither ended nor were running, in pytest's order."""
        seen = {t.id for t in self.done} | {self.running}
        return tuple(tid for tid in self.collected if tid not in seen)


def read_progress(path: Path) -> Progress | None:
    """The run's progress; None where the plugin wrote none (pytest died before collecting)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    collected: tuple[str, ...] = ()
    started: dict[str, int] = {}
    done: list[JunitTest] = []
    for obj in _lines(text):
        if "collected" in obj:
            collected = tuple(obj["collected"])
        elif "start" in obj:
            started[obj["start"]] = int(obj.get("threads") or 1)
        elif "end" in obj:
            started.pop(obj["end"], None)
            done.append(_ended(obj))
    if not collected and not done:
        return None
    running = next(iter(started), None)
    return Progress(collected, tuple(done), running, started.get(running, 1) if running else 1)


def process_tests(folder: Path) -> tuple[tuple[JunitTest, ...] | None, Progress | None]:
    """The tests one process's folder says ended: its junit report's, or where the process died
    before writing one, its progress record's, with that record (whose `running` test it died in);
    (None, None) where it holds neither. A report torn by the process's death (killed while pytest
    wrote it), or one of no test where tests ran, is no report: the progress record stands in."""
    try:
        tests = read_junit(folder / JUNIT)
    except JunitError:
        tests = None
    progress = read_progress(folder / PROGRESS)
    # A report of no test from a run in which tests started: pytest's own reporting failed (a
    # test broke it, e.g. a doctest in threads leaving linecache patched in a loop). The progress
    # record says which test it was.
    if tests is not None and (tests or progress is None or not (progress.done or progress.running)):
        return tuple(tests), None
    return (None, None) if progress is None else (progress.done, progress)


def crashed_test(progress: Progress, message: str, text: str) -> JunitTest | None:
    """The running test as a failing one, its process's ending as its failure; None if none ran."""
    if progress.running is None:
        return None
    return JunitTest(
        id=progress.running,
        outcome=CRASHED,
        threads=progress.running_threads,
        message=message,
        text=text,
    )


def _ended(obj: dict) -> JunitTest:
    return JunitTest(
        id=obj["end"],
        outcome=obj.get("outcome", "passed"),
        threads=int(obj.get("threads") or 1),
        single_reason=obj.get("single_reason", ""),
        message=obj.get("message", ""),
        text=obj.get("text", ""),
    )


def _lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a line cut short by the crash
        if isinstance(obj, dict):
            out.append(obj)
    return out
