"""Excerpts of stored trials' artefacts for the report: the innermost frames of one py-spy dump
per hang signature, and per native-crash signature its crash sites with one native stack each."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.stores.store import Store
from harness.trial import native
from harness.trial.folder import NATIVE_STACK, PYSPY
from harness.trial.hangs import excerpt, read_pyspy_json
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.signature import in_hang_key


def hang_excerpts(records: Sequence[TrialResult], store_dir: Path) -> list[tuple[str, str, str]]:
    """(signature summary, trial id, excerpt) for the first stored trial of each hang signature
    whose py-spy dump (`artefacts/<trial>/pyspy.json`) is in the store: the threads the hang key
    is built from, innermost frames first."""
    store = Store(store_dir)
    out, seen = [], set()
    for r in sorted(records, key=lambda r: r.trial_id):
        if r.outcome is not Outcome.HANG or r.signature in seen or not r.artefacts:
            continue
        path = store.artefacts_of(r) / PYSPY
        if not path.is_file():
            continue
        seen.add(r.signature)
        text = excerpt(read_pyspy_json(path), keep=in_hang_key)
        out.append((r.signature_summary or r.signature or "hang", r.trial_id, text.rstrip()))
    return out


NATIVE_EXCERPT_FRAMES = 10


@dataclass(kw_only=True, slots=True, frozen=True)
class NativeExcerpt:
    summary: str
    site: str
    """harness.trial.native.crash_site of the trials' kept native stacks."""
    trials: int
    """Trials of this signature whose native stack landed at `site`."""
    of: int
    """Trials of this signature with a kept native stack."""
    trial_id: str
    text: str


def native_excerpts(records: Sequence[TrialResult], store_dir: Path) -> list[NativeExcerpt]:
    """Per native-crash signature, its crash sites (harness.trial.native.crash_site of every stored
    `native_stack.txt`) with counts and the first trial's innermost frames: one signature can
    hide several causes (the H200 campaign's segfaults during garbage collection share one key,
    whatever the finaliser), and the native site is what tells them apart."""
    store = Store(store_dir)
    by_sig: dict[str, list[tuple[TrialResult, list, str]]] = {}
    for r in sorted(records, key=lambda r: r.trial_id):
        if r.outcome is not Outcome.ABORT or not r.artefacts:
            continue
        path = store.artefacts_of(r) / NATIVE_STACK
        if path.is_file():
            frames = native.read_kept(path.read_text(errors="replace"))
            by_sig.setdefault(r.signature or "", []).append((r, frames, native.crash_site(frames)))
    out = []
    for kept in by_sig.values():
        sites = collections.Counter(site for _, _, site in kept)
        for site, n in sites.most_common():
            r, frames = next((r, f) for r, f, s in kept if s == site)
            out.append(
                NativeExcerpt(
                    summary=r.signature_summary or r.signature or "native crash",
                    site=site,
                    trials=n,
                    of=len(kept),
                    trial_id=r.trial_id,
                    text=native.render(frames, limit=NATIVE_EXCERPT_FRAMES),
                )
            )
    return out
