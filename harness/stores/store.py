"""Append-only result store: `<root>/trials.jsonl` plus `<root>/artefacts/<safe trial id>/`.

A finished trial's folder may be packed into `<safe trial id>.zip` beside it (`python -m harness
pack`, harness.stores.zips): `artefacts_of` then hands back a `PackedArtefacts` (a `zipfile.Path`), which
readers use as they use a folder (`/`, `is_file`, `read_text`).

Crash safety: each record is one line written by a single `os.write` on an `O_APPEND` fd and
then fsync'd, so concurrent appends from the matrix's threads never interleave inside a line,
and a harness killed mid-write leaves at most one torn line, always the last one and always
without its newline. `load()` ignores such a line (that trial simply reruns) and the next
`append` cuts it off first, so it never ends up in the middle. Anything else that is not a
record (garbage in the middle, a newline-terminated line that is not JSON, a record missing
fields) means the store is not ours or was edited: `StoreError`, with the store left untouched.
One writer process per store (the matrix); threads within it are fine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.runtime.errors import UserInputError
from harness.trial.outcome import Outcome, TrialResult

TRIALS_NAME = "trials.jsonl"
ARTEFACTS_NAME = "artefacts"
PACKED_SUFFIX = ".zip"


class StoreError(UserInputError):
    """The store cannot be read or written; the message is one line naming the file."""


ZIP_ERRORS = (zipfile.BadZipFile, zlib.error)
"""What reading a damaged zip raises: a bad CRC or header; damaged deflate data."""


def packed_path(folder: Path) -> Path:
    """Where a trial folder's zip lies: beside it, `<name>.zip` (harness.stores.zips)."""
    return folder.with_name(folder.name + PACKED_SUFFIX)


class PackedArtefacts(zipfile.Path):
    """A packed trial's files (harness.stores.zips), read like its folder; a damaged member is a
    StoreError naming the zip (one line), not zipfile's BadZipFile from deep inside a reader."""

    @property
    def file(self) -> Path:
        """The zip itself."""
        return Path(self.root.filename)

    def read_text(self, *args, **kwargs) -> str:
        with self._damaged():
            return super().read_text(*args, **kwargs)

    def read_bytes(self) -> bytes:
        with self._damaged():
            return super().read_bytes()

    @contextlib.contextmanager
    def _damaged(self) -> Iterator[None]:
        try:
            yield
        except ZIP_ERRORS as e:
            raise StoreError(f"packed artefacts {self.file}: {self.at}: {e}") from None


ArtefactPath = Path | PackedArtefacts
"""A trial's artefacts: its folder, or the zip it was packed into (harness.stores.zips)."""


class Store:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"result store {self.root} is not a directory")
        self.trials_path = self.root / TRIALS_NAME
        if self.trials_path.exists() and not self.trials_path.is_file():
            raise StoreError(f"result store {self.trials_path} is not a regular file")
        self._lock = threading.Lock()  # serialises the tail repair with appends
        self._tail_checked = False

    def artefacts_dir(self, trial_id: str, attempt: int = 0) -> Path:
        """`artefacts/<safe id>/`, created; distinct trial ids never share a folder, nor do the
        attempts of one id (a rerun of an out-of-memory trial: `<safe id>-attempt<n>`), so a
        stored record's artefacts stay its own."""
        name = safe_name(trial_id) + (f"-attempt{attempt}" if attempt else "")
        path = self.root / ARTEFACTS_NAME / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def artefacts_of(self, record: TrialResult) -> ArtefactPath | None:
        """Where this store keeps `record`'s artefacts: its folder under the store's own
        `artefacts/` (the recorded path may be relative to another working folder), or that
        folder packed as `<name>.zip`; None if the record has none. The zip wins where both are
        there: it is written whole before its folder goes (harness.stores.zips), and a folder beside it
        is one a pack stopped before removing, or an empty shell (a GPU host's copy of a checkout
        whose packing was not yet committed holds every packed trial's folder, empty)."""
        if not record.artefacts:
            return None
        folder = self.root / ARTEFACTS_NAME / Path(record.artefacts).name
        packed = packed_path(folder)
        if packed.is_file():
            try:
                return PackedArtefacts(packed)
            except (zipfile.BadZipFile, OSError) as e:
                raise StoreError(f"packed artefacts {packed} cannot be read: {e}") from None
        return folder

    def append(self, result: TrialResult) -> None:
        data = _line(result)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if not self._tail_checked:
                self.load()  # refuse (untouched) a store that is not ours
                self._cut_torn_tail()
                self._tail_checked = True
            fd = os.open(self.trials_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        if written != len(data):
            raise StoreError(f"{self.trials_path}: short write ({written} of {len(data)} bytes)")

    def load(self) -> list[TrialResult]:
        """All complete records in order; a torn final line is ignored."""
        if not self.trials_path.exists():
            return []
        try:
            raw = self.trials_path.read_bytes()
        except OSError as exc:
            raise StoreError(f"{self.trials_path}: cannot read: {exc.strerror}") from None
        lines = raw.split(b"\n")
        complete = lines[:-1]  # the last element is b"" or a torn line without "\n"
        return [_parse_line(self.trials_path, n, line) for n, line in enumerate(complete, 1)]

    def rewrite(self, records: list[TrialResult]) -> None:
        """Replace every record (harness.stores.resign) atomically (`write_atomic`): a reader or an
        interruption sees the old store or the new one, never a mix."""
        with self._lock:
            try:
                write_atomic(self.trials_path, b"".join(_line(r) for r in records))
            except OSError as exc:
                raise StoreError(f"{self.trials_path}: cannot rewrite: {exc.strerror}") from None

    def done_ids(self) -> set[str]:
        return done_ids(self.load())

    def _cut_torn_tail(self) -> None:
        try:
            with open(self.trials_path, "rb+") as fh:
                size = fh.seek(0, os.SEEK_END)
                if size == 0:
                    return
                fh.seek(size - 1)
                if fh.read(1) == b"\n":
                    return
                fh.seek(0)
                keep = fh.read().rfind(b"\n") + 1
                fh.truncate(keep)
                os.fsync(fh.fileno())
        except FileNotFoundError:
            return


def _line(result: TrialResult) -> bytes:
    """One record as stored: sorted-key ASCII JSON and a newline."""
    return (json.dumps(result.to_json(), sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def write_atomic(path: Path, data: bytes) -> None:
    """`path` gets `data` or stays as it was: a temp file beside it, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _parse_line(path: Path, number: int, line: bytes) -> TrialResult:
    where = f"{path} line {number}"
    try:
        data = json.loads(line)
    except ValueError:
        raise StoreError(f"{where}: not a JSON record: {line[:60]!r}") from None
    if not isinstance(data, dict):
        raise StoreError(f"{where}: expected a JSON object, got {type(data).__name__}")
    try:
        return TrialResult.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{where}: not a trial record ({type(exc).__name__}: {exc})") from None


def safe_name(trial_id: str) -> str:
    """A file name for a trial id: readable part plus a hash when characters were replaced,
    so that `a/b` and `a_b` do not collide."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", trial_id).strip("._") or "trial"
    if clean == trial_id and len(clean) <= 100:
        return clean
    digest = hashlib.sha1(trial_id.encode()).hexdigest()[:8]
    return f"{clean[:100]}-{digest}"


def done_ids(records: Sequence[TrialResult]) -> set[str]:
    """Trial ids a resumed run skips: every stored one except a trial that ran out of device
    memory (RESOURCE): that measured the packing, not the cell, so the next run (with its own
    packing, e.g. after raising a workload's gpu_slots) tries it again; the old record stays."""
    return {r.trial_id for r in records if r.outcome is not Outcome.RESOURCE}
