"""Where stores are and which one holds a trial: every store under results/ (or runs/), and the
record of a trial id."""

from __future__ import annotations

from pathlib import Path

from harness.args import UsageError
from harness.stores.store import TRIALS_NAME, Store, StoreError
from harness.trial.outcome import TrialResult


class TrialNotFound(StoreError):
    """No store searched holds the trial id (one line, exit 2 from the command line)."""


def default_stores(results_root: Path) -> list[Path]:
    """Every store directly under results/ (a folder holding a trials.jsonl)."""
    if not results_root.is_dir():
        return []
    return sorted(p.parent for p in results_root.glob(f"*/{TRIALS_NAME}"))


def trial_stores() -> list[Path]:
    """Where show, replay and shrink look for a trial id: this checkout's own runs first (runs/*/,
    where the README's main job writes), then the committed stores (results/*/): a trial id of the
    main job is in both, and the one a user just ran is the one they mean."""
    return [*default_stores(Path("runs")), *default_stores(Path("results"))]


def trial_stores_given(names: list[str] | None) -> list[Path]:
    """The --store folders a trial id is looked up in, else `trial_stores()`."""
    return [Path(s) for s in names] if names else trial_stores()


def find_trial(trial_id: str, store_dirs: list[Path]) -> tuple[TrialResult, Path]:
    """The stored record of `trial_id` and the store holding it."""
    for d in store_dirs:
        for r in Store(d).load():
            if r.trial_id == trial_id and r.replay_of is None:
                return r, d
    raise TrialNotFound(f"trial {trial_id!r} not found in {_stores_named(store_dirs)}")


def _stores_named(store_dirs: list[Path], shown: int = 3) -> str:
    """The stores looked in, the first `shown` by name and the rest as a count (an error is one
    short line, not a list of every folder)."""
    if not store_dirs:
        return "no stores"
    names = ", ".join(str(d) for d in store_dirs[:shown])
    more = len(store_dirs) - shown
    return f"{len(store_dirs)} stores ({names}{f' and {more} more' if more > 0 else ''})"


def stores_given(names: list[str] | None, *, existing: bool = False) -> list[Path]:
    """The --store folders, else every store under results/ (report, families, resign, pack); with
    `existing`, a --store folder that holds no store is bad input (one line) before any is read."""
    stores = [Path(s) for s in names] if names else default_stores(Path("results"))
    if not stores:
        raise UsageError("no stores given and none found under results/")
    for store in stores if existing else ():
        if not (store / TRIALS_NAME).is_file():
            raise UsageError(f"no result store at {store} (no {TRIALS_NAME})")
    return stores
