"""What the harness should say about a generated program, from its four parts alone.

The rules, for a run in which the fault fired (the truth says so; other runs are not compared):

1. R5 kills the process (SIGSEGV, SIGABRT): no report can hide a native crash, whatever the ending.
   Failing, ABORT, race R5.
2. non-daemon-wait never lets the interpreter exit: every run fails as HANG (idle past `--hang`) or
   TIMEOUT, whatever the fault, and names the races its output showed before; except where the
   first process's main thread itself raised (rule 4's raise in main, not in a child): that run
   failed of the exception, CRASH, whatever kept its exit waiting.
3. How the fault's exception reaches what the harness reads (`shown`):
   - a traceback: default-hook (Python's hook prints it; a pool's map and asyncio's gather re-raise
     it in the main thread), logging (`logging.exception` at error level), exception-group (the
     main thread raises the group);
   - a record: own-excepthook (the thread still died uncaught; the harness records the death even
     where the program's hook prints nothing), and default-hook under executor-submit (an unread
     Future's exception, told at interpreter exit);
   - a line: retry and future-logged log `Type: message` on one line, no traceback: a catalogued
     race's message there is the race's face, any other message (the deterministic ValueError) is
     a log line like any other, invisible by design;
   - nothing: swallowed, by design. And an unread Future under os-exit: os._exit skips the
     interpreter exit, where alone "never read" can be told.
   dict-mutation is the exception: where the mutation met the building of a guard, torch logs it
   itself (`Error while creating guard`, a traceback at error level) whatever the report; where it
   met the trace, nothing does. Which one a run meets is chance, so under a report that shows
   nothing, whether the run fails and what it names is not judged (None).
4. The exit status shows a failure by itself: exit-code exits 1 when the program lost an item, and
   the main thread's own raise (exception-group, default-hook under executor-map or to-thread)
   exits 1 whatever the ending. thread-sys-exit's sys.exit ends only its thread: exit 0.
5. Races are named only where the exception itself was shown (3); a failure shown by exit status
   alone is `unknown`. The deterministic fault, shown, fails each run the same way and fast:
   stress stops with `a deterministic failure, not a race`. A race shown by status alone may or
   may not fail the same way three times (the lost-item count varies): not judged.
6. `none` is a clean program: no run fails (except under rule 2).
7. The CUDA faults raise in the worker as F2 does, so rules 2-5 apply: reduce-overhead and autograd
   threads name F1 (the cudagraph trees' per-thread state missing in a fresh or autograd thread),
   eager work beside another thread's capture names `capture`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.shapes.shape import Shape

RACES = {
    "F2": "F2",
    "R4": "R4",
    "dict-mutation": "dict-mutation",
    "R5": "R5",
    "reduce-overhead": "F1",
    "capture-beside-eager": "capture",
    "autograd": "F1",
}
NORMAL_EXITS = ("exit-0", "exit-code", "thread-sys-exit")
"""Endings that reach the interpreter's own exit (where an unread Future is told)."""
HUNG = frozenset({"hang", "timeout"})


@dataclass(frozen=True)
class Verdict:
    failing: bool | None
    """Every run in which the fault fired counts as failing; None: not judged."""
    races: frozenset[str] | None
    """The races a failing run names; None: not judged."""
    deterministic: bool | None
    """Stress stops with `a deterministic failure`; None: not judged."""
    outcomes: frozenset[str]
    """The outcomes a failing run may have (result.json's `outcome`); empty when none fails."""
    why: str


def shown(shape: Shape) -> str:
    """`traceback`, `record`, `line` or `none` (rule 3)."""
    if shape.report in ("logging", "exception-group"):
        return "traceback"
    if shape.report == "default-hook" and shape.start != "executor-submit":
        return "traceback"
    if shape.report == "default-hook":
        return "record" if shape.ending in NORMAL_EXITS else "none"
    if shape.report == "own-excepthook":
        return "record"
    if shape.report in ("retry", "future-logged"):
        return "line"
    return "none"


def raises_in_main(shape: Shape) -> bool:
    return shape.report == "exception-group" or (
        shape.report == "default-hook" and shape.start in ("executor-map", "to-thread")
    )


def expected(shape: Shape) -> Verdict:
    # The first process's main thread raised: a child's raise ends the child, the parent still waits.
    main_died = raises_in_main(shape) and shape.fault != "none" and shape.start != "child"
    hang = shape.ending == "non-daemon-wait" and not main_died
    if shape.fault == "R5":
        return Verdict(True, frozenset({"R5"}), False, frozenset({"abort"}), "rule 1: a native crash")
    if shape.fault == "none":
        if hang:
            return Verdict(True, frozenset(), None, HUNG, "rules 2, 6: clean, but never exits")
        return Verdict(False, frozenset(), False, frozenset(), "rule 6: clean")
    race = shape.fault != "deterministic"
    how = shown(shape)
    if how == "none" and shape.fault == "dict-mutation":
        return _by_torch_log(shape, hang)
    named = how in ("traceback", "record") or (how == "line" and race)
    by_status = shape.ending == "exit-code" or raises_in_main(shape)
    failing = named or by_status or hang
    races = frozenset({RACES[shape.fault]}) if race and named else frozenset()
    outcomes = HUNG if hang else frozenset({"crash"}) if failing else frozenset()
    why = f"rule 3: shown as {how}" + ("; rule 4: exit status" if by_status else "") + ("; rule 2" if hang else "")
    return Verdict(failing, races, _deterministic(race, failing, named, hang), outcomes, why)


def _deterministic(race: bool, failing: bool, named: bool, hang: bool) -> bool | None:
    """Rule 5: a shown race is never deterministic; one shown by status alone, or a hang, is not judged."""
    if not failing:
        return False
    if race:
        return False if named else None
    return None if hang else True


def _by_torch_log(shape: Shape, hang: bool) -> Verdict:
    """Rule 3's exception: dict-mutation under a report that shows nothing may show by torch's log."""
    failing = True if hang or shape.ending == "exit-code" else None
    outcomes = HUNG if hang else frozenset({"crash"})
    return Verdict(failing, None, None, outcomes, "rule 3: only torch's own guard log may show it")
