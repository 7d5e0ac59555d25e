"""Tokenized datasets: memory-mapped, lazy, validated at open.

`open_dataset(path)` accepts
- a `datasets.save_to_disk` folder: `state.json` lists `_data_files`, each an Arrow IPC *stream*;
- a single Arrow IPC file, in file format (magic `ARROW1`) or stream format;
- a `.parquet` file.
Columns: `input_ids` and `loss_mask`, both list<integer> (list or large_list, any int width), and
optionally `doc_ids`, list<integer> with one entry per token (same length as the row's
`input_ids`): the document each token belongs to when several documents are packed into one row
(`prepare --pack-docs`, `data.synthetic_pack_len`). Tokens with equal ids are one document; ids
need not start at 0 (-1 is what collate pads with: keep it out of the data). With it, neither
the target forward nor the drafter objective attends across a document, and no label is taken
from another document. Without it, a row is one document.

Properties:
- Arrow data is memory-mapped and read zero-copy: opening costs the metadata plus one pass over
  the list offsets (lengths, length-mismatch check); token values are touched only by `row()` and
  by the scans behind `max_token_id()` / `loss_counts()`, which run once and are cached.
- Parquet cannot be mapped zero-copy: it is read one row group at a time (a pass at open for the
  lengths, then a small LRU of decoded row groups for `row()`). Random access across many row
  groups re-decodes them; convert large Parquet corpora to Arrow IPC (`prepare`) for training.
- Every failure the user can fix is a `DataError` with one line naming the path and the problem.
  Structural validation (`validate(full=True)`) runs before any offset is used, so corrupt offsets
  cannot make `row()` read outside a buffer.
- A `TokenDataset` is immutable after open and safe to read from several prefetch threads; the
  Parquet cache is guarded by a lock.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dflash.trainer_errors import DataError

COLUMNS = ("input_ids", "loss_mask")
DOC_IDS = "doc_ids"
"""The optional per-token document-id column of packed rows (see the module docstring)."""
ARROW_FILE_MAGIC = b"ARROW1"
# Stream end-of-stream marker: continuation token 0xFFFFFFFF + zero metadata length. A stream cut
# exactly at a message boundary reads back without error but with fewer rows; the missing marker is
# the only sign of it.
ARROW_STREAM_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
PARQUET_CACHE_ROW_GROUPS = 8


@dataclass(kw_only=True, slots=True)
class _Chunk:
    """One record batch as numpy views: rows [start, start + n) of the dataset."""

    start: int
    offsets: np.ndarray  # [n + 1] into ids / mask (same lengths, checked at open)
    mask_offsets: np.ndarray  # [n + 1] into mask
    ids: np.ndarray
    mask: np.ndarray
    doc_offsets: np.ndarray | None = None  # [n + 1] into docs; None when the data has no doc_ids
    docs: np.ndarray | None = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_schema(schema: pa.Schema, where: str) -> None:
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(missing)} (found: {', '.join(schema.names) or 'none'})")
    for name in COLUMNS + ((DOC_IDS,) if DOC_IDS in schema.names else ()):
        tp = schema.field(name).type
        if not (pa.types.is_list(tp) or pa.types.is_large_list(tp)) or not pa.types.is_integer(tp.value_type):
            raise DataError(f"{where}: column {name} must be a list of integers, got {tp}")


def _same_lengths(ids_off: np.ndarray, other_off: np.ndarray, other: str, start: int, where: str) -> None:
    diff = np.flatnonzero(np.diff(ids_off) != np.diff(other_off))
    if diff.size:
        row = int(diff[0])
        raise DataError(
            f"{where}: row {start + row}: input_ids has {int(ids_off[row + 1] - ids_off[row])} tokens "
            f"but {other} has {int(other_off[row + 1] - other_off[row])}"
        )


def _numpy_chunk(batch: pa.RecordBatch, start: int, where: str) -> _Chunk:
    names = COLUMNS + ((DOC_IDS,) if DOC_IDS in batch.schema.names else ())
    arrs = {name: batch.column(name) for name in names}
    for name, arr in arrs.items():
        if arr.null_count or arr.values.null_count:
            raise DataError(f"{where}: column {name} contains nulls")
    # .offsets honours the array's slice offset and indexes into the unsliced .values.
    offs = {name: _values(arr.offsets).astype(np.int64, copy=False) for name, arr in arrs.items()}
    for name in names[1:]:
        # Checked here, once per record batch: a bad row must fail at open, not deep in collate.
        _same_lengths(offs["input_ids"], offs[name], name, start, where)
    docs = arrs.get(DOC_IDS)
    return _Chunk(
        start=start,
        offsets=offs["input_ids"],
        mask_offsets=offs["loss_mask"],
        ids=_values(arrs["input_ids"].values),
        mask=_values(arrs["loss_mask"].values),
        doc_offsets=offs.get(DOC_IDS),
        docs=None if docs is None else _values(docs.values),
    )


def _values(arr: pa.Array) -> np.ndarray:
    """A null-free integer array (_check_schema) as numpy, zero-copy. pyarrow's own to_numpy imports
    pandas (0.27 s on a CPU host, more where imports are slow) for a corpus that never uses it."""
    whole = np.frombuffer(arr.buffers()[1], dtype=np.dtype(str(arr.type)), count=arr.offset + len(arr))
    return whole[arr.offset :]


def _chunk_docs(c: _Chunk, j: int) -> np.ndarray | None:
    """Document ids of row j of chunk c (int64), or None without the column."""
    if c.docs is None or c.doc_offsets is None:
        return None
    return c.docs[c.doc_offsets[j] : c.doc_offsets[j + 1]].astype(np.int64)


def _has_doc_ids(chunks: list[_Chunk], where: str) -> bool:
    with_docs = {c.docs is not None for c in chunks}
    if len(with_docs) > 1:
        raise DataError(f"{where}: some record batches or shards have a {DOC_IDS} column and others do not")
    return with_docs == {True}


def _chunks_from_batches(batches: list[pa.RecordBatch], start: int, where: str) -> list[_Chunk]:
    chunks = []
    for batch in batches:
        try:
            batch.validate(full=True)
        except (pa.ArrowException, ValueError) as exc:
            raise DataError(f"{where}: corrupt Arrow data ({_first_line(exc)})") from None
        if batch.num_rows:
            chunks.append(_numpy_chunk(batch, start, where))
            start += batch.num_rows
    return chunks


def _read_ipc(path: str) -> list[pa.RecordBatch]:
    """Record batches of one Arrow IPC file (file or stream format), memory-mapped."""
    try:
        source = pa.memory_map(path, "r")
        head = source.read(len(ARROW_FILE_MAGIC))
        source.seek(0)
        if head == ARROW_FILE_MAGIC:
            reader = pa.ipc.open_file(source)
            schema = reader.schema
            _check_schema(schema, path)
            return [reader.get_batch(i) for i in range(reader.num_record_batches)]
        size = source.size()
        if size < len(ARROW_STREAM_EOS):
            raise DataError(f"{path}: not an Arrow IPC file ({size} bytes)")
        source.seek(size - len(ARROW_STREAM_EOS))
        if source.read(len(ARROW_STREAM_EOS)) != ARROW_STREAM_EOS:
            raise DataError(f"{path}: truncated or not an Arrow IPC file (no end-of-stream marker)")
        source.seek(0)
        reader = pa.ipc.open_stream(source)
        _check_schema(reader.schema, path)
        return list(reader)
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{path}: truncated or corrupt Arrow data ({_first_line(exc)})") from None


class _ArrowSource:
    """Zero-copy chunks of one or more IPC files (the shards of a save_to_disk folder)."""

    def __init__(self, files: list[str]) -> None:
        self.chunks: list[_Chunk] = []
        start = 0
        for path in files:
            got = _chunks_from_batches(_read_ipc(path), start, path)
            self.chunks.extend(got)
            start += sum(len(c.offsets) - 1 for c in got)
        self.num_rows = start
        self.lengths = (
            np.concatenate([np.diff(c.offsets) for c in self.chunks]) if self.chunks else np.zeros(0, np.int64)
        )
        self._starts = np.array([c.start for c in self.chunks], dtype=np.int64)
        self.has_doc_ids = _has_doc_ids(self.chunks, files[0] if len(files) == 1 else os.path.dirname(files[0]))

    def _chunk(self, i: int) -> _Chunk:
        return self.chunks[int(np.searchsorted(self._starts, i, side="right")) - 1]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        c = self._chunk(i)
        j = i - c.start
        ids = c.ids[c.offsets[j] : c.offsets[j + 1]]
        mask = c.mask[c.mask_offsets[j] : c.mask_offsets[j + 1]]
        return ids.astype(np.int64), mask.astype(np.int64)

    def doc_ids(self, i: int) -> np.ndarray | None:
        c = self._chunk(i)
        return _chunk_docs(c, i - c.start)

    def iter_chunks(self) -> Iterator[_Chunk]:
        return iter(self.chunks)


class _ParquetSource:
    """Row groups of a Parquet file, decoded on demand into a small LRU cache."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, _Chunk] = OrderedDict()
        try:
            self._file = pq.ParquetFile(path, memory_map=True)
            _check_schema(self._file.schema_arrow, path)
            self.has_doc_ids = DOC_IDS in self._file.schema_arrow.names
            self._columns = list(COLUMNS) + ([DOC_IDS] if self.has_doc_ids else [])
            lengths, starts, start = [], [], 0
            for g in range(self._file.num_row_groups):
                chunk = self._decode(g, start)
                starts.append(start)
                lengths.append(np.diff(chunk.offsets))
                start += len(chunk.offsets) - 1
        except (pa.ArrowException, OSError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path}: truncated or corrupt Parquet data ({_first_line(exc)})") from None
        self.num_rows = start
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self._starts = np.array(starts, dtype=np.int64)

    def _decode(self, group: int, start: int) -> _Chunk:
        table = self._file.read_row_group(group, columns=self._columns).combine_chunks()
        chunks = _chunks_from_batches(table.to_batches(), start, self.path)
        if chunks:
            return chunks[0]
        empty = np.zeros(1, np.int64)  # a row group with no rows
        return _Chunk(
            start=start,
            offsets=empty,
            mask_offsets=empty,
            ids=empty[:0],
            mask=empty[:0],
            doc_offsets=empty if self.has_doc_ids else None,
            docs=empty[:0] if self.has_doc_ids else None,
        )

    def _group(self, group: int) -> _Chunk:
        with self._lock:
            chunk = self._cache.get(group)
            if chunk is not None:
                self._cache.move_to_end(group)
                return chunk
            try:
                chunk = self._decode(group, int(self._starts[group]))
            except (pa.ArrowException, OSError) as exc:
                raise DataError(f"{self.path}: cannot read row group {group} ({_first_line(exc)})") from None
            self._cache[group] = chunk
            if len(self._cache) > PARQUET_CACHE_ROW_GROUPS:
                self._cache.popitem(last=False)
            return chunk

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        c = self._group(int(np.searchsorted(self._starts, i, side="right")) - 1)
        j = i - c.start
        ids = c.ids[c.offsets[j] : c.offsets[j + 1]]
        mask = c.mask[c.mask_offsets[j] : c.mask_offsets[j + 1]]
        return ids.astype(np.int64), mask.astype(np.int64)

    def doc_ids(self, i: int) -> np.ndarray | None:
        c = self._group(int(np.searchsorted(self._starts, i, side="right")) - 1)
        return _chunk_docs(c, i - c.start)

    def iter_chunks(self) -> Iterator[_Chunk]:
        # Bypasses the cache: a full scan would only evict the groups training is using.
        for g in range(len(self._starts)):
            yield self._decode(g, int(self._starts[g]))


def _row_reduce(chunks: Iterator[_Chunk], num_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (max id, min id, supervised-token count), vectorised with reduceat per chunk."""
    row_max = np.full(num_rows, -1, dtype=np.int64)
    row_min = np.zeros(num_rows, dtype=np.int64)
    loss = np.zeros(num_rows, dtype=np.int64)
    for c in chunks:
        n = len(c.offsets) - 1
        nonempty = np.flatnonzero(np.diff(c.offsets) > 0)
        if nonempty.size == 0:
            continue
        # Rows are contiguous, so the segment of a non-empty row runs to the next non-empty start;
        # the last one is cut at its own end offset (values may extend past it in a sliced array).
        ids = c.ids[: c.offsets[n]]
        starts = c.offsets[nonempty]
        rows = c.start + nonempty
        row_max[rows] = np.maximum.reduceat(ids, starts)
        row_min[rows] = np.minimum.reduceat(ids, starts)
        mask = (c.mask[: c.mask_offsets[n]] != 0).astype(np.int64)
        loss[rows] = np.add.reduceat(mask, c.mask_offsets[nonempty])
    return row_max, row_min, loss


class TokenDataset:
    """Read-only view of a tokenized dataset (see the module docstring).

    `select(rows)` returns a view over a subset; its row numbers are positions in `rows`.
    """

    __slots__ = ("path", "_source", "_rows", "_lengths", "_stats", "_stats_lock")

    def __init__(self, *, path: str, source: _ArrowSource | _ParquetSource, rows: np.ndarray | None = None) -> None:
        self.path = path
        self._source = source
        self._rows = rows
        self._lengths = source.lengths if rows is None else source.lengths[rows]
        self._lengths.setflags(write=False)
        self._stats: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._stats_lock = threading.Lock()

    def __len__(self) -> int:
        return int(self._lengths.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """[N] int64 token counts, read from the list offsets (read-only array)."""
        return self._lengths

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, loss_mask) of row i as fresh int64 arrays."""
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        return self._source.row(int(i) if self._rows is None else int(self._rows[i]))

    @property
    def has_doc_ids(self) -> bool:
        """Whether the rows carry a `doc_ids` column (packed documents)."""
        return self._source.has_doc_ids

    def doc_ids(self, i: int) -> np.ndarray | None:
        """Document id of each token of row i (fresh int64 array), or None without the column."""
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        return self._source.doc_ids(int(i) if self._rows is None else int(self._rows[i]))

    def _row_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._stats_lock:
            if self._stats is None:
                stats = _row_reduce(self._source.iter_chunks(), self._source.num_rows)
                self._stats = stats if self._rows is None else tuple(s[self._rows] for s in stats)
            return self._stats

    def max_token_id(self) -> int:
        """Largest token id in the (selected) rows; -1 when every row is empty."""
        row_max = self._row_stats()[0]
        return int(row_max.max()) if row_max.size else -1

    def min_token_id(self) -> int:
        lengths = self._lengths
        row_min = self._row_stats()[1][lengths > 0]
        return int(row_min.min()) if row_min.size else 0

    def loss_counts(self) -> np.ndarray:
        """[N] int64 number of supervised (loss_mask != 0) tokens per row."""
        return self._row_stats()[2]

    def select(self, rows: np.ndarray | list[int]) -> TokenDataset:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"select: rows out of range for {len(self)} rows")
        base = rows if self._rows is None else self._rows[rows]
        return TokenDataset(path=self.path, source=self._source, rows=base)


def _save_to_disk_files(folder: str) -> list[str]:
    state_path = os.path.join(folder, "state.json")
    if not os.path.isfile(state_path):
        if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
            raise DataError(f"{folder}: is a DatasetDict folder; pass one split, e.g. {folder}/train")
        raise DataError(f"{folder}: not a datasets.save_to_disk folder (no state.json)")
    try:
        with open(state_path, encoding="utf-8") as fh:
            names = [entry["filename"] for entry in json.load(fh)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{state_path}: unreadable state.json ({_first_line(exc)})") from None
    if not names:
        raise DataError(f"{folder}: state.json lists no data files")
    files = [os.path.join(folder, n) for n in names]
    for f in files:
        if not os.path.isfile(f):
            raise DataError(f"{folder}: data file {os.path.basename(f)} listed in state.json is missing")
    return files


def open_dataset(path: str) -> TokenDataset:
    """Open a save_to_disk folder, an Arrow IPC file or a .parquet file (see module docstring)."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or folder")
    if os.path.isdir(path):
        source: _ArrowSource | _ParquetSource = _ArrowSource(_save_to_disk_files(path))
    elif path.endswith(".parquet"):
        source = _ParquetSource(path)
    else:
        source = _ArrowSource([path])
    if source.num_rows == 0:
        raise DataError(f"{path}: dataset is empty (0 rows)")
    return TokenDataset(path=path, source=source)


def validate_vocab(ds: TokenDataset, vocab_size: int) -> None:
    """DataError unless every token id lies in [0, vocab_size): data and target must agree."""
    top = ds.max_token_id()
    if top >= vocab_size:
        raise DataError(
            f"{ds.path}: vocabulary mismatch between data and target: max id {top} >= target vocab {vocab_size}"
        )
    low = ds.min_token_id()
    if low < 0:
        raise DataError(f"{ds.path}: negative token id {low} in input_ids")


SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8()))])
DOC_SCHEMA = SCHEMA.append(pa.field(DOC_IDS, pa.list_(pa.int32())))
WRITE_BATCH_ROWS = 1024

Row = tuple[list[int], list[int]]
PackedRow = tuple[list[int], list[int], list[int]]


def write_token_file(
    path: str, rows: Iterator[Row] | Iterator[PackedRow], *, metadata: dict | None = None, doc_ids: bool = False
) -> int:
    """Write (input_ids, loss_mask) rows as an Arrow IPC file, atomically; returns the row count.
    With `doc_ids` the rows are (input_ids, loss_mask, doc_ids) and the file gets that column.

    The rows go to `<path>.tmp-<pid>-<thread>` first and are renamed over `path` only when the
    writer closed cleanly, so a reader (or a crash) never sees a half-written file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    base = DOC_SCHEMA if doc_ids else SCHEMA
    schema = base.with_metadata({k: json.dumps(v) for k, v in (metadata or {}).items()})
    width = len(schema.names)
    count = 0
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            bufs: list[list[list[int]]] = [[] for _ in range(width)]
            for row in rows:
                if len(row) != width:
                    raise ValueError(
                        f"row {count}: {len(row)} columns, the file has {width} ({', '.join(schema.names)})"
                    )
                for name, col in zip(schema.names[1:], row[1:]):
                    if len(col) != len(row[0]):
                        raise ValueError(f"row {count}: {len(row[0])} input_ids but {len(col)} {name} values")
                for buf, col in zip(bufs, row):
                    buf.append(list(col))
                count += 1
                if len(bufs[0]) == WRITE_BATCH_ROWS:
                    writer.write_batch(pa.record_batch(bufs, schema=schema))
                    bufs = [[] for _ in range(width)]
            if bufs[0]:
                writer.write_batch(pa.record_batch(bufs, schema=schema))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return count


def pack_documents(rows: Iterator[Row], max_len: int) -> Iterator[PackedRow]:
    """Pack consecutive (input_ids, loss_mask) documents into rows of at most `max_len` tokens,
    greedily in order (a row is closed when the next document does not fit). Each packed row gets
    doc_ids 0, 1, ... per document. Deterministic: the input order alone decides the rows.

    A document longer than `max_len` is a ValueError: callers drop those first (prepare skips
    them, the synthetic corpus never makes one), since a packed row must fit the largest bucket.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    ids: list[int] = []
    mask: list[int] = []
    docs: list[int] = []
    for n, (doc_tokens, doc_mask) in enumerate(rows):
        if len(doc_tokens) > max_len:
            raise ValueError(f"document {n} has {len(doc_tokens)} tokens, more than the packed row length {max_len}")
        if ids and len(ids) + len(doc_tokens) > max_len:
            yield ids, mask, docs
            ids, mask, docs = [], [], []
        doc = docs[-1] + 1 if docs else 0
        ids.extend(int(t) for t in doc_tokens)
        mask.extend(int(m) for m in doc_mask)
        docs.extend([doc] * len(doc_tokens))
    if ids:
        yield ids, mask, docs


def split_for_training(
    ds: TokenDataset, *, min_loss_tokens: int, heldout_samples: int, seed: int
) -> tuple[TokenDataset, TokenDataset]:
    """(train, heldout) views: rows with < min_loss_tokens supervised tokens dropped, then
    `heldout_samples` rows picked by `seed` kept out of training (they are the tau prompts).

    SpecForge drops samples with fewer than 2 * block_size supervised tokens (its `build_dataloader`;
    TorchSpec's `min_loss_tokens: 32`).
    """
    keep = np.flatnonzero(ds.loss_counts() >= min_loss_tokens)
    if keep.size <= heldout_samples:
        raise DataError(
            f"{ds.path}: only {keep.size} of {len(ds)} rows have >= {min_loss_tokens} supervised tokens; "
            f"need more than data.heldout_samples={heldout_samples}"
        )
    rng = np.random.default_rng([seed, 0x484F4C44])  # independent stream from the epoch shuffles
    picked = rng.permutation(keep)
    heldout = np.sort(picked[:heldout_samples])
    train = np.sort(picked[heldout_samples:])
    return ds.select(train), ds.select(heldout)
