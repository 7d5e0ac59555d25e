"""One pytest run's tests, read from its junit report (`--junitxml`), as `harness hunt` needs
them: each test's id, outcome, the threads its body ran in, and its failure's text.

The failure's text is pytest's: the `<failure>`/`<error>` message and traceback, then the test's
captured output (`junit_logging=all`). pytest-run-parallel catches a test body's exception in its
worker threads and raises the first one in the test, so the report holds it as any failure.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path

from harness.campaign.hunt.plugin import NODEID, SINGLE_REASON, THREADS

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
CRASHED = "crashed"
"""The test that was running when its run's process died (harness.campaign.hunt.progress)."""
FAILING = (FAILED, ERROR, CRASHED)
_CAPTURED = ("system-out", "system-err")
_TAGS = {"failure": FAILED, "error": ERROR}
"""junit's elements for a failing test, as outcomes."""


@dataclass(frozen=True, slots=True)
class JunitTest:
    id: str
    """pytest's node id; a collection error's module where there is none."""
    outcome: str
    threads: int
    """Threads the body ran in (pytest-run-parallel); 1 for a test that never started."""
    single_reason: str = ""
    """Why pytest-run-parallel kept it in one thread (a marker, its own detection); '' if it did not."""
    message: str = ""
    """The failure's one-line message ('' where it passed)."""
    text: str = ""
    """The failure's message, traceback and captured output, for the diagnosis."""
    collected: bool = True
    """False for a collection error (no test ran)."""


class JunitError(ValueError):
    """A junit report that is not one pytest wrote."""


def read_junit(path: Path) -> list[JunitTest] | None:
    """The report's tests in its order; None where pytest wrote none (it died, or never ran)."""
    if not path.is_file():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise JunitError(f"{path}: not a junit report ({e})") from None
    # A testcase with no name is pytest's own failure, not a test (an internal error in its reporting).
    return one_per_test([t for t in (_test(case) for case in root.iter("testcase")) if t.id])


def one_per_test(tests: list[JunitTest]) -> list[JunitTest]:
    """One entry per test id, at its first place: pytest writes a second testcase for a test whose
    teardown errs after its call failed (a timed-out test's leaked threads); the first failure is
    the test's, and the later entries' texts follow it."""
    out: dict[str, JunitTest] = {}
    for t in tests:
        first = out.get(t.id)
        if first is None or (first.outcome not in FAILING and t.outcome in FAILING):
            out[t.id] = t if first is None else replace(t, text="\n".join(x for x in (t.text, first.text) if x))
        elif t.outcome in FAILING:
            out[t.id] = replace(first, text="\n".join(x for x in (first.text, t.text) if x))
    return list(out.values())


def _test(case: ET.Element) -> JunitTest:
    props = {p.get("name"): p.get("value") or "" for p in case.iter("property")}
    bad = next((child for child in case if child.tag in _TAGS), None)
    skipped = next((child for child in case if child.tag == SKIPPED), None)
    outcome = _TAGS[bad.tag] if bad is not None else SKIPPED if skipped is not None else PASSED
    fallback = "::".join(x for x in (case.get("classname"), case.get("name")) if x)
    return JunitTest(
        id=props.get(NODEID) or fallback,
        outcome=outcome,
        threads=int(props.get(THREADS) or 1),
        single_reason=props.get(SINGLE_REASON, ""),
        message=_first_line(bad.get("message") or bad.text or "") if bad is not None else "",
        text=_failure_text(case, bad) if bad is not None else "",
        collected=NODEID in props,
    )


def _failure_text(case: ET.Element, bad: ET.Element) -> str:
    parts = [bad.get("message") or "", bad.text or ""]
    parts += [child.text or "" for child in case if child.tag in _CAPTURED]
    return "\n".join(p for p in parts if p.strip())


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
