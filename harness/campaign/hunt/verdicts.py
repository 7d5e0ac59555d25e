"""What each test of a hunt is, from the runs' records: its k/n per fix set with the Wilson
interval, the races its failures named, the rerun with one thread, and the verdict.

Verdicts, first that applies:
- `ok`: it never failed (`skipped` where it was skipped in every run);
- `not a race`: it failed in every run and fails with 1 thread too (the rerun, or a test
  pytest-run-parallel ran in one thread anyway), or it failed at collection, before any thread, or
  its failure text names no race but what the catalogue knows is none by itself (a recompile limit
  reached);
- `not thread-safe`: its failure text names no race but the test's own state, which its threads
  share (a doctest or redirect_stdout swapping sys.stdout, pytest.warns, monkeypatch, a module
  global it writes): the test's doing, not torch's;
- `race`: a catalogued race named by its failure text, or it failed in every run with threads and
  passed with 1 thread ("fails only with threads"), or it failed in some runs with threads and
  passed in others;
- `flaky`: it failed in some runs though it ran in 1 thread, and no catalogued race is named;
- `after another test`: it failed in every run with threads and passed with 1, no race named, and
  run alone in its own process with the same threads it passed too: what fails it is the state a
  test before it left in the process (that test's race, or its own), not a race of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.campaign.hunt.junit import FAILING, SKIPPED
from harness.campaign.hunt.records import ONE_THREAD, RunRecord, TestRecord
from harness.diagnosis.catalogue import NOT_RACE_KINDS, load
from harness.diagnosis.side_by_side import ArmCount

OK, SKIP, RACE, NOT_RACE, FLAKY, AFTER = "ok", "skipped", "race", "not a race", "flaky", "after another test"
OWN_STATE = "not thread-safe"
ONE_THREAD_TOO = "fails with 1 thread too: not a race"
ONLY_WITH_THREADS = "fails only with threads"


@dataclass(frozen=True, slots=True)
class TestVerdict:
    id: str
    threads: int
    """The most threads its body ran in over the runs (1: pytest-run-parallel kept it single)."""
    arms: tuple[ArmCount, ...]
    verdict: str
    why: str
    races: tuple[str, ...] = ()
    one_thread: str | None = None
    """The rerun with one thread: `passed`, `failed`, or None where there was none."""
    single_reason: str = ""
    message: str = ""
    """The first failure's one-line message."""
    holds: tuple[str, ...] = field(default=())
    """Fix sets with no failure of a test that failed under another set."""
    alone: str | None = None
    """The rerun alone in its own process with the hunt's threads: `passed`, `failed`, or None."""

    @property
    def failed(self) -> int:
        return sum(a.failed for a in self.arms)

    @property
    def runs(self) -> int:
        return sum(a.runs for a in self.arms)


def always_failing(records: Sequence[RunRecord]) -> list[str]:
    """Tests that failed in every run that reported them, with threads, and in at least one run:
    the ones the rerun with one thread tells apart."""
    seen = _per_test(records)
    return [
        tid
        for tid, tests in seen.items()
        if all(t.outcome in FAILING for t in tests) and max(t.threads for t in tests) > 1 and tests[0].collected
    ]


def verdicts(records: Sequence[RunRecord], fix_sets: Sequence[tuple[str, ...] | None]) -> list[TestVerdict]:
    """One verdict per test id, in the order the runs reported them."""
    main = [r for r in records if not r.rerun]
    # A rerun with one thread answers only for a test that failed in every run: an early rerun
    # (started before the last runs ended) may hold tests that then passed.
    wanted = set(always_failing(main))
    rerun = {t.id: t.outcome for r in records if r.run == ONE_THREAD for t in r.tests or () if t.id in wanted}
    alone = {t.id: t.outcome for r in records if r.alone for t in r.tests or ()}
    per_test = _per_test(main)
    return [
        _verdict(tid, main, fix_sets, tests, rerun.get(tid), _passed(alone.get(tid))) for tid, tests in per_test.items()
    ]


def needs_alone(verdict: TestVerdict) -> bool:
    """Failed in every run with threads, passed with 1 and named no race: alone with the same
    threads tells its own race from the state an earlier test left."""
    return verdict.verdict == RACE and verdict.one_thread == "passed" and not verdict.races and verdict.alone is None


def _passed(outcome: str | None) -> str | None:
    return None if outcome is None else "failed" if outcome in FAILING else "passed"


def _per_test(records: Sequence[RunRecord]) -> dict[str, list[TestRecord]]:
    out: dict[str, list[TestRecord]] = {}
    for r in sorted(records, key=lambda r: r.run):
        for t in r.tests or ():
            out.setdefault(t.id, []).append(t)
    return out


def _verdict(
    tid: str,
    records: Sequence[RunRecord],
    fix_sets: Sequence[tuple[str, ...] | None],
    tests: list[TestRecord],
    rerun: str | None,
    alone: str | None = None,
) -> TestVerdict:
    arms = tuple(_arm(tid, records, k, fixes) for k, fixes in enumerate(fix_sets))
    failing = [t for t in tests if t.outcome in FAILING]
    races, not_races = split_races(dict.fromkeys(race for t in failing for race in t.races))
    one_thread = None if rerun is None else "failed" if rerun in FAILING else "passed"
    threads = max(t.threads for t in tests)
    verdict, why = _judge(tests, failing, races, threads, one_thread)
    if verdict == RACE and not races and not_races:
        verdict, why = _not_a_race(not_races, one_thread)
    if verdict == RACE and one_thread == "passed" and not races and alone == "passed":
        verdict, why = (
            AFTER,
            f"fails only in the suite: alone it passed with {threads} threads and with 1 (another test's state)",
        )
    return TestVerdict(
        id=tid,
        threads=threads,
        arms=arms,
        verdict=verdict,
        why=why,
        races=races,
        one_thread=one_thread,
        single_reason=next((t.single_reason for t in tests if t.single_reason), ""),
        message=failing[0].message if failing else "",
        holds=_holds(arms),
        alone=alone,
    )


def split_races(ids: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The races among catalogue ids a failure named, and the rest: what the catalogue knows is no
    race (a test's own state, a recompile limit reached)."""
    catalogue = load()
    known = {r.id: r.kind for r in catalogue.races}
    not_races = tuple(i for i in ids if known.get(i) in NOT_RACE_KINDS)
    return tuple(i for i in ids if i not in not_races), not_races


def _not_a_race(ids: tuple[str, ...], one_thread: str | None) -> tuple[str, str]:
    """A failure with threads that names no race but what is none by itself: the test's own state
    first (its threads share it), else a limit reached (each thread's compiles count toward it)."""
    catalogue = load()
    own = [catalogue.race(i).title for i in ids if catalogue.race(i).kind == "own-state"]
    if own:
        return OWN_STATE, f"not thread-safe: the test's own state ({'; '.join(own)}), not a race"
    what = "; ".join(catalogue.race(i).title for i in ids)
    threads = f"; it {ONLY_WITH_THREADS}" if one_thread == "passed" else ""
    return NOT_RACE, f"{what} (not a race by itself){threads}"


def _judge(
    tests: list[TestRecord], failing: list[TestRecord], races: tuple[str, ...], threads: int, one_thread: str | None
) -> tuple[str, str]:
    """The verdict and its reason, a phrase that says the verdict too."""
    if not failing:
        return (SKIP, "skipped in every run") if all(t.outcome == SKIPPED for t in tests) else (OK, "never failed")
    if not failing[0].collected:
        return NOT_RACE, "a collection error, before any test ran: not a race"
    if one_thread == "failed" or (len(failing) == len(tests) and threads == 1):
        return NOT_RACE, ONE_THREAD_TOO + (f" (though its message is {', '.join(races)}'s)" if races else "")
    if races:
        return RACE, f"race {', '.join(races)}" + (f"; it {ONLY_WITH_THREADS}" if one_thread == "passed" else "")
    if one_thread == "passed":
        return RACE, f"{ONLY_WITH_THREADS}: a race"
    if threads > 1:
        return RACE, f"fails in some runs with {threads} threads and passes in others: a race"
    return FLAKY, "flaky: fails in some runs though it ran in 1 thread, and no catalogued race is named"


def _arm(tid: str, records: Sequence[RunRecord], arm: int, fixes: tuple[str, ...] | None) -> ArmCount:
    tests = [t for r in records if r.arm == arm for t in r.tests or () if t.id == tid]
    return ArmCount(fixes=fixes, failed=sum(t.outcome in FAILING for t in tests), runs=len(tests))


def _holds(arms: tuple[ArmCount, ...]) -> tuple[str, ...]:
    if len(arms) < 2 or not any(a.failed for a in arms):
        return ()
    return tuple(a.name for a in arms if a.runs and not a.failed and a.fixes is not None)
