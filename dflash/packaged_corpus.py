"""Synthetic corpora shipped with the package (dflash/corpora/*.parquet), read in place instead of
regenerated: a GPU preset's corpus took about 100 s of greedy generation on a fresh H200 host.

Each file is a corpus dflash.synthetic wrote on a GPU host, rewritten as zstd Parquet under the
same name; the name is a digest of every input of the generation (target config, data config,
vocabulary), so a run whose config changes any of them finds none and generates its own.
The embedded random target's weights come from a seeded CPU init, but its greedy completions also
depend on the host (bf16 kernels, the transformers release), so before a shipped corpus is used
`matches` asks the run's target for its greedy choice at the first PROBE_TOKENS completion tokens
of PROBE_ROWS rows: unless at least AGREE of them agree, the corpus is regenerated as before. The
choices come teacher-forced from one forward over the rows; generating them token by token took
1.4-2.6 s of a GPU host's start, every step a new attention length for SDPA's first use.

Each file stores `content_digest` of its rows in its metadata (the tests check it, and that a
regenerated corpus has the digest of the first generation).

    python -m dflash.packaged_corpus .cache/dflash/synthetic-*.arrow

rewrites corpora the trainer generated into dflash/corpora/ (pyproject.toml ships them).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dflash.data import TokenDataset, open_dataset

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora")
PROBE_ROWS = 8
PROBE_TOKENS = 8
AGREE = 0.5
"""Share of probe tokens that must agree: a few near-tie argmax flips between hosts pass, another
target (about one chance in the vocabulary size per token) does not."""
DIGEST_KEY = "content_sha256"

Generate = Callable[[list[list[int]], int], list[list[int]]]
Predict = Callable[[list[list[int]]], list[list[int]]]
"""rows -> the target's greedy next token after each position of each row (teacher-forced)."""


def shipped_path(cache_path: str, folder: str | None = None) -> str | None:
    """The shipped file for the corpus `dflash.synthetic.corpus_path` names, if there is one."""
    stem = os.path.splitext(os.path.basename(cache_path))[0]
    path = os.path.join(folder or FOLDER, f"{stem}.parquet")
    return path if os.path.isfile(path) else None


def content_digest(ds: TokenDataset) -> str:
    """sha256 of every row's input_ids (int32) and loss_mask (int8), with the row lengths."""
    h = hashlib.sha256()
    for i in range(len(ds)):
        ids, mask = ds.row(i)
        h.update(np.int64(len(ids)).tobytes())
        h.update(np.asarray(ids, dtype=np.int32).tobytes())
        h.update(np.asarray(mask, dtype=np.int8).tobytes())
    return h.hexdigest()


def _probe_rows(ds: TokenDataset) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, expected first completion tokens) of the first PROBE_ROWS rows with both parts."""
    prompts, expected = [], []
    for i in range(min(len(ds), 4 * PROBE_ROWS)):
        ids, mask = ds.row(i)
        sup = np.flatnonzero(mask != 0)
        if sup.size and sup[0] > 0:
            prompts.append([int(t) for t in ids[: sup[0]]])
            expected.append([int(t) for t in ids[sup[0] : sup[0] + PROBE_TOKENS]])
        if len(prompts) == PROBE_ROWS:
            break
    return prompts, expected


def matches(path: str, predict: Predict) -> tuple[bool, str]:
    """(whether `predict` chooses the shipped corpus's completions, what the probe found)."""
    prompts, expected = _probe_rows(open_dataset(path))
    if not prompts:
        return False, "no row to probe"
    got = predict([p + e for p, e in zip(prompts, expected)])
    total = sum(len(e) for e in expected)
    # Position len(p) - 1 + j chooses completion token j.
    same = sum(g[len(p) - 1 + j] == t for g, p, e in zip(got, prompts, expected) for j, t in enumerate(e))
    return same >= AGREE * total, f"{same} of {total} probe tokens agree"


def teacher_forced(generate: Generate) -> Predict:
    """A Predict from a greedy generator: one one-token call per prefix (for stand-in targets)."""

    def predict(rows: list[list[int]]) -> list[list[int]]:
        return [[(generate([row[: k + 1]], 1)[0] or [-1])[0] for k in range(len(row))] for row in rows]

    return predict


def find(cache_path: str, predict: Predict, report: Callable[[str], None] | None = None) -> str | None:
    """The shipped corpus for `cache_path` if there is one and this target chooses its completions."""
    path = shipped_path(cache_path)
    if path is None:
        return None
    ok, found = matches(path, predict)
    if report is not None:
        verdict = "using it" if ok else "another target's: regenerating"
        report(f"corpus: shipped {os.path.basename(path)} ({found}), {verdict}")
    return path if ok else None


def package(arrow_path: str, folder: str | None = None) -> str:
    """Rewrite a corpus the trainer generated as the shipped Parquet file of the same name."""
    table = pa.ipc.open_file(pa.memory_map(arrow_path, "r")).read_all()
    meta = dict(table.schema.metadata or {})
    meta[DIGEST_KEY.encode()] = json.dumps(content_digest(open_dataset(arrow_path))).encode()
    folder = folder or FOLDER
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, os.path.splitext(os.path.basename(arrow_path))[0] + ".parquet")
    pq.write_table(
        table.replace_schema_metadata(meta), out, compression="zstd", compression_level=19, use_dictionary=False
    )
    return out


def recorded_digest(path: str) -> str | None:
    """The content digest a shipped file recorded when it was written."""
    raw = (pq.read_schema(path).metadata or {}).get(DIGEST_KEY.encode())
    return None if raw is None else json.loads(raw)


def main(argv: list[str]) -> int:
    for path in argv:
        out = package(path)
        print(f"{out}: {os.path.getsize(out)} bytes, {recorded_digest(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
