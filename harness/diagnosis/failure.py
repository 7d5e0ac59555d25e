"""A failing run as the diagnosis sees it, and the error bad diagnose input raises."""

from __future__ import annotations

from dataclasses import dataclass

from harness.runtime.errors import UserInputError

AFTER_FAILURE = "after a thread of the run failed"
"""A HANG's detail prefix where a thread of the run failed before the rest hung."""


class DiagnoseError(UserInputError):
    """Bad input: one line, exit 2."""


@dataclass(kw_only=True, slots=True)
class Failure:
    """One failing run as the diagnosis sees it."""

    source: str
    outcome: str
    key: str | None
    summary: str | None
    text: str = ""
    native: str = ""
    torch: str | None = None
    fixes: tuple[str, ...] = ()
    """The fixes the run held (a stored trial's strategy), part of the context a face needs."""
    run: str = ""
    """The run it came from (several failures of one run share it); `source` when empty."""
    count: int = 1
    """How often the run printed it (each thread's traceback counts)."""
    detail: str = ""
    """The run's outcome detail (a HANG's kind, a TIMEOUT's busy cores)."""
    command: tuple[str, ...] = ()
    """The user's command (a stress run's), for the `stress --fix` line."""
    process: str = ""
    """A child process of the run it failed in (`pid 123 (rank-0)`); "": the first process."""
    options: tuple[str, ...] = ()
    """The stress options the run failed under (`--plan switch`): the `stress --fix` line keeps them."""
    threads: tuple[str, ...] = ()
    """The threads that printed it (the run record's failure entry); () where unknown."""
    threads_started: int | None = None
    """Threads the program itself started (TrialResult.threads_started); None: unknown."""
    exposures: dict[str, int] | None = None
    """Openings of each measured race window in the run (TrialResult.exposures); None: not measured."""
    config_threads: str = ""
    """The configs the program set and the threads that set them (`THREAD: NAME=VALUE; ...`, the
    trial folder's config_sets.jsonl)."""

    @property
    def run_id(self) -> str:
        return self.run or self.source

    def context(self) -> str:
        """What a race's `context` regexes read: the output, the fixes, the configs set in threads."""
        parts = [self.text, "fixes: " + ",".join(self.fixes)]
        if self.config_threads:
            parts.append(f"config set in threads: {self.config_threads}")
        return "\n".join(parts)
