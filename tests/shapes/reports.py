"""Each report as program text: `install()` before the work, `make_job(state, results)` (a worker's
job for one item: it sets results[item] when the item is done), `settle(futures)` (what a pool's
submitter does with its Futures) and `finish()` after every worker is done."""

from __future__ import annotations

QUIET = """
def install():
    pass


def settle(futures):
    wait(futures)  # fire and forget: nobody reads a Future's exception


def finish():
    pass
"""

UNCAUGHT_JOB = """
def make_job(state, results):
    def job(item):
        run_item(state, item)
        results[item] = True

    return job
"""

DEFAULT_HOOK = UNCAUGHT_JOB + QUIET

OWN_EXCEPTHOOK = (
    UNCAUGHT_JOB
    + QUIET.replace("def install():\n    pass", "def install():\n    threading.excepthook = count_death")
    + """

deaths = []


def count_death(args):
    # The program's own hook: a dead worker is counted for the summary, printed nowhere.
    deaths.append(f"{args.exc_type.__name__} in {args.thread.name if args.thread else '?'}")
"""
)

LOGGING = (
    """
def make_job(state, results):
    def job(item):
        try:
            run_item(state, item)
            results[item] = True
        except Exception:
            log.exception("item %d failed", item)

    return job
"""
    + QUIET
)

RETRY = (
    """
TRIES = 3


def make_job(state, results):
    def job(item):
        for attempt in range(1, TRIES + 1):
            try:
                run_item(state, item)
                results[item] = True
                return
            except Exception as exc:
                log.warning("item %d, attempt %d of %d: %s: %s", item, attempt, TRIES, type(exc).__name__, exc)
        log.error("giving up on item %d after %d attempts", item, TRIES)

    return job
"""
    + QUIET
)

SWALLOWED = (
    """
swallowed = []


def make_job(state, results):
    def job(item):
        try:
            run_item(state, item)
            results[item] = True
        except Exception:
            swallowed.append(item)  # counted in the final line, printed nowhere

    return job
"""
    + QUIET
)

EXCEPTION_GROUP = """
errors = []


def make_job(state, results):
    def job(item):
        try:
            run_item(state, item)
            results[item] = True
        except Exception as exc:
            errors.append(exc)

    return job
""" + QUIET.replace(
    "def finish():\n    pass",
    'def finish():\n    if errors:\n        raise ExceptionGroup(f"{len(errors)} of {ITEMS} items failed", errors)',
)

FUTURE_LOGGED = UNCAUGHT_JOB + QUIET.replace(
    "def settle(futures):\n    wait(futures)  # fire and forget: nobody reads a Future's exception",
    """def settle(futures):
    for item, future in enumerate(futures):
        exc = future.exception()
        if exc is not None:
            log.error("item %d failed: %s: %s", item, type(exc).__name__, exc)""",
)

SOURCES = {
    "default-hook": DEFAULT_HOOK,
    "own-excepthook": OWN_EXCEPTHOOK,
    "logging": LOGGING,
    "retry": RETRY,
    "swallowed": SWALLOWED,
    "exception-group": EXCEPTION_GROUP,
    "future-logged": FUTURE_LOGGED,
}
