"""Pack a store's finished trial folders into one zip each (`python -m harness pack STORE...`).

A trial leaves five to nine small files (output, spec, result, heartbeat, plan, plan log, dumps).
Over a campaign that is thousands of files, most smaller than a disk block: the committed stores
had grown to 9,650 artefact files, 43 MB of text taking 68 MiB of disk (77 MiB with the rest of the
checkout), and an H200 run ships the whole checkout under a 64 MiB limit, which the 77 MiB one
exceeded. One zip per trial keeps every file (`harness
show`, `replay`, `resign` and the report read it through `Store.artefacts_of`), compresses the
text, and, one file per finished trial that never changes again, keeps git's history from
storing a store-wide archive again on every run.

Only folders a record of the store (or of its `retired/` store) names are packed: a folder without
a record is a trial in flight or one an interruption left to rerun, and the runner writes into it.
A dflash trial's `run/` (the trainer's checkpoints and export, `campaign.local.with_run_dir`; git ignores it
and h200_run.sh leaves it out of stores.tgz) is neither packed nor removed: it stays in the folder,
which then holds nothing else. Zips are byte-for-byte reproducible (members sorted, fixed
timestamps), so packing the same folder twice gives the same file. Order of writes per folder: the
zip is written to a temporary name, flushed and renamed into place, then the folder is removed; an
interruption leaves a stray temporary (removed by the next pack) or the folder beside a whole zip
(the zip is read, see `Store.artefacts_of`), and a rerun removes that folder once every file in it
is in the zip unchanged. A folder beside a zip that differs from it is an error, with both kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from harness.runtime.errors import UserInputError
from harness.stores.retire import RETIRED_NAME
from harness.stores.store import (
    ARTEFACTS_NAME,
    TRIALS_NAME,
    ZIP_ERRORS,
    PackedArtefacts,
    Store,
    StoreError,
    packed_path,
)

RUN_DIR = "run"

# 1980-01-01, zip's epoch: a member's time would otherwise change the archive's bytes per pack.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class PackError(UserInputError):
    """Bad input to pack: one line, nothing written."""


@dataclass(kw_only=True, slots=True)
class Packed:
    store: Path
    folders: int = 0
    files: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    left: int = 0
    """Folders no record names (a trial in flight or to rerun): left as they are."""

    def line(self) -> str:
        if not self.folders:
            return f"{self.store}: nothing to pack ({self.left} folder(s) without a record left as they are)"
        return (
            f"{self.store}: packed {self.folders} trial folder(s), {self.files} files, "
            f"{self.bytes_before / 2**20:.1f} MiB -> {self.bytes_after / 2**20:.1f} MiB"
            + (f"; {self.left} folder(s) without a record left as they are" if self.left else "")
        )


def check(store_dir: Path) -> None:
    if not (store_dir / TRIALS_NAME).is_file():
        raise PackError(f"no result store at {store_dir} (no {TRIALS_NAME})")


def pack_store(store_dir: Path) -> list[Packed]:
    """Pack the store's folders, then its retired store's: one Packed per store."""
    check(store_dir)
    out = [_pack_one(Store(store_dir))]
    if (store_dir / RETIRED_NAME / TRIALS_NAME).is_file():
        out.append(_pack_one(Store(store_dir / RETIRED_NAME)))
    return out


def _pack_one(store: Store) -> Packed:
    done = Packed(store=store.root)
    named = {Path(r.artefacts).name for r in store.load() if r.artefacts}
    base = store.root / ARTEFACTS_NAME
    if not base.is_dir():
        return done
    for stray in base.glob(".*.tmp"):  # a pack interrupted before its rename
        stray.unlink()
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        if folder.name not in named:
            done.left += 1
            continue
        if packed_path(folder).is_file():
            _drop_packed_folder(folder)
            continue
        files, before = _pack_folder(folder)
        done.folders += 1
        done.files += files
        done.bytes_before += before
        done.bytes_after += packed_path(folder).stat().st_size
    return done


def _trial_files(folder: Path) -> list[Path]:
    """The files a pack keeps: all but the trainer's `run/`."""
    return sorted(
        p for p in folder.rglob("*") if (p.is_file() or p.is_symlink()) and p.relative_to(folder).parts[0] != RUN_DIR
    )


def _remove_packed(folder: Path) -> None:
    """The folder's packed files gone; `run/` stays, and the folder with it."""
    for child in folder.iterdir():
        if child.name == RUN_DIR and child.is_dir() and not child.is_symlink():
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


def _pack_folder(folder: Path) -> tuple[int, int]:
    """Zip `folder` to `<folder>.zip` and remove what was packed: (files packed, their bytes)."""
    members = _trial_files(folder)
    target = packed_path(folder)
    fd, tmp = tempfile.mkstemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp")
    size = 0
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would differ from the files packed
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
                for path in members:
                    if path.is_symlink():  # the runner writes none; a link's target may be gone
                        raise StoreError(f"cannot pack {folder}: {path.name} is a symbolic link")
                    data = path.read_bytes()
                    size += len(data)
                    info = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=_FIXED_TIME)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    zf.writestr(info, data, compresslevel=9)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        # The rename reaches the disk before the folder goes: else a crash could lose both.
        dfd = os.open(folder.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"cannot pack {folder}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _remove_packed(folder)
    return len(members), size


def _drop_packed_folder(folder: Path) -> None:
    """Remove what a folder beside its zip holds (an interrupted pack, an empty shell; `run/`
    stays), once every such file is in the zip with the same bytes; else StoreError and both stay."""
    packed = packed_path(folder)
    try:
        with zipfile.ZipFile(packed) as zf:
            held = set(zf.namelist())
            for path in _trial_files(folder):
                name = path.relative_to(folder).as_posix()
                if name not in held or zf.read(name) != path.read_bytes():
                    raise StoreError(
                        f"{folder} differs from {packed.name} beside it ({name}): "
                        "remove the one that is wrong, then pack again"
                    )
    except ZIP_ERRORS as e:
        raise StoreError(f"{packed} beside {folder.name} cannot be read: {e}") from None
    _remove_packed(folder)


def unpack_into(packed: PackedArtefacts, target: Path) -> None:
    """A packed trial's files written out as a folder (harness merge copies a packed record's
    artefacts into a store as a folder; `pack` packs it again there)."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(packed.file) as zf:
            for info in zf.infolist():
                name = Path(info.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise StoreError(f"{packed.file}: member {info.filename!r} leaves its folder")
                zf.extract(info, target)
    except ZIP_ERRORS as e:
        raise StoreError(f"packed artefacts {packed.file} cannot be read: {e}") from None
