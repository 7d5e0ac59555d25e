"""The generated tables: the markers that fence them, the text of each and `rebuild`, which
regenerates every block and plot from the stores. A store's tables (one block per matrix) go to
`<store>/SUMMARY.md` beside its plots, the bench tables to `results/BENCHES.md`, the failure-modes
overview to `results/FAILURE-MODES.md`, and REPORT.md keeps the tables a reader of the findings
needs: the race catalogue, the races per torch version and the index of stores.

Everything here is a function of the stored records alone (no clock, no spec), so regenerating a
report from the same store gives byte-identical text and plots; text outside the markers is kept
verbatim.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import bench_records, benches, verdicts, versions
from harness.analysis.cell_plots import plot_paths, write_plots
from harness.analysis.cell_tables import family_legend, has_memory, markdown_table, pivot_table, signature_lines
from harness.analysis.excerpts import hang_excerpts, native_excerpts
from harness.analysis.family_table import family_table
from harness.analysis.summary import CellSummary, summarize
from harness.campaign.matrix import presets as matrix_presets
from harness.diagnosis import families, tables
from harness.diagnosis.catalogue import RecordSource
from harness.stores import retire
from harness.stores.store import Store, write_atomic
from harness.text import clip
from harness.trial.outcome import TrialResult

OVERVIEW_BLOCK = "failure-modes"
STORES_BLOCK = "stores"
SUMMARY_NAME = "SUMMARY.md"
"""A store's generated tables, beside its trials.jsonl and plots/."""
BENCHES_NAME = "BENCHES.md"
"""The bench tables, in the folder that holds the stores."""
FAILURE_MODES_NAME = "FAILURE-MODES.md"
"""The failure-modes overview (every store's families by torch version), beside REPORT.md's
`results/`: a lookup table, too long for the findings."""
BENCHES_HEADER = "# Benches: each configuration alone on the machine\n\nWritten by `python -m harness report`.\n\n"
MEMORY_TERMS = (
    "; GPU GiB is the most one trial held on one GPU: the workload's "
    "reported allocator peak (the CUDA context, about 1 GiB, not counted) "
    "or, where higher, the runner's nvidia-smi samples (context counted)"
)


FINDINGS = Path("docs") / "findings"
"""REPORT's evidence pages (beside it): a generated block may sit in one of them instead."""


def begin_marker(name: str) -> str:
    return f"<!-- harness:begin {name} -->"


def end_marker(name: str) -> str:
    return f"<!-- harness:end {name} -->"


def replace_block(text: str, name: str, body: str) -> str:
    """Put `body` between the markers of `name`, keeping everything else verbatim.

    A missing block is appended at the end; markers out of order or repeated are an error, since
    guessing would risk destroying hand-written text.
    """
    begin, end = begin_marker(name), end_marker(name)
    nb, ne = text.count(begin), text.count(end)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if nb == 0 and ne == 0:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return f"{text}{sep}{block}\n"
    i, j = text.find(begin), text.find(end)
    if nb != 1 or ne != 1 or j < i:
        raise ValueError(f"REPORT markers for {name!r} are unbalanced (begin x{nb}, end x{ne})")
    return text[:i] + block + text[j + len(end) :]


def benches_for(matrix: str, bench_runs: Sequence) -> list:
    """The benches that may price matrix `matrix`'s verdicts: those on as many GPUs as the trials of
    the workload of that name took (the preset's `Workload.gpus`; 1 for a matrix that is no
    preset). tools/h200_run.sh names benches by preset alone, and gpu-topology-4's `launch-bound`
    (the seed topology) is not gpu-campaign's."""
    gpus = (
        {w.name: w.gpus for w in matrix_presets.get(matrix).workloads.values()}
        if matrix in matrix_presets.PRESETS
        else {}
    )
    return [b for b in bench_runs if b.gpus == gpus.get(b.preset, 1)]


def block_body(
    name: str,
    store_dir: Path,
    records: Sequence[TrialResult],
    cells: Sequence[CellSummary],
    plots: Sequence[Path],
    report_dir: Path,
    retired: Sequence[TrialResult] = (),
    bench_runs: Sequence = (),
    root: Path | None = None,
) -> str:
    """The block of matrix `name`, for a document in `report_dir` (its links are relative to it;
    paths in commands to `root`, where they are run); `retired` are the records `harness retire`
    took out of its count; `bench_runs` (harness.analysis.benches) price the verdict alone on the
    GPU where a bench ran it."""
    root = root if root is not None else report_dir
    lines = _intro_lines(name, _rel(store_dir, root), records, cells) + _pivot_lines(cells)
    lines.append(markdown_table(cells))
    sigs = signature_lines(cells)
    if sigs:
        lines += ["", "Signatures:", ""] + [f"- `{s}`" for s in sigs]
    lines += _verdict_lines(name, cells, bench_runs) + _excerpt_lines(records, store_dir)
    lines += retired_lines(store_dir, retired, root)
    if plots:
        lines += [""] + [f"![{p.stem}]({_rel(p, report_dir)})" for p in plots]
    return "\n".join(lines)


def _intro_lines(name: str, where: str, records: Sequence[TrialResult], cells: Sequence[CellSummary]) -> list[str]:
    """The block's heading, what its table's terms mean, and when, where and on what torch it ran."""
    started = sorted(r.started_at for r in records if r.started_at)
    versions = sorted({r.torch_version for r in records if r.torch_version})
    hosts = sorted({r.host for r in records if r.host})
    return [
        f"#### Matrix `{name}`: {len(records)} trials in `{where}`",
        "",
        f"Regenerate with `python -m harness report --store {where}`. "
        "k/n counts CRASH/ABORT/HANG/WRONG_RESULT over trials that ran to an outcome (TIMEOUT, "
        "device out-of-memory (oom) and harness errors are shown as +N and left out); p<x is the rule-of-three bound at k=0; p vs raw is "
        "the one-sided Fisher exact p that the strategy fails less often than raw; TTFF is "
        "the median serial time to the first failure; vs best is tokens/s over the fastest clean cell "
        "of the same workload measured on the same host and day (most of each cell's trials)"
        + (MEMORY_TERMS if has_memory(cells) else "")
        + ".",
        "",
        f"Trials started {started[0] if started else '?'} .. {started[-1] if started else '?'}; "
        f"torch {', '.join(versions) or '?'}; hosts {', '.join(hosts) or '?'}.",
        "",
    ]


def _pivot_lines(cells: Sequence[CellSummary]) -> list[str]:
    """The strategy-by-column pivot and its family legend, where the matrix has two columns."""
    pivot = pivot_table(cells)
    if not pivot:
        return []
    lines = [
        "At a glance: k/n and the failure families (harness.diagnosis.families) per cell; +N oom = out of "
        "device memory, left out.",
        "",
        pivot,
        "",
    ]
    legend = family_legend(cells)
    return lines + (["Families: " + "; ".join(legend) + ".", ""] if legend else [])


def _verdict_lines(name: str, cells: Sequence[CellSummary], bench_runs: Sequence) -> list[str]:
    priced = benches_for(name, bench_runs)
    found = verdicts.lines(verdicts.recommend(cells, bench_runs=priced), bench_runs=priced)
    if not found:
        return []
    return [
        "",
        f"Verdict ({verdicts.__name__}: 0 failures and >= {verdicts.MIN_STRESSED} trials under "
        "a fault plan; priced against global-lock and eager):",
        "",
    ] + [f"- {v}" for v in found]


def _excerpt_lines(records: Sequence[TrialResult], store_dir: Path) -> list[str]:
    """An excerpt of a hang dump per hang signature and of a native stack per crash site."""
    lines = []
    for summary, trial_id, text in hang_excerpts(records, store_dir):
        head = f"Hang dump excerpt, `{summary}` (trial `{trial_id}`, py-spy, innermost frames):"
        lines += ["", head, "", "```", text, "```"]
    for x in native_excerpts(records, store_dir):
        head = (
            f"Native stack excerpt, `{x.summary}`: crash site `{clip(x.site, 100)}` in {x.trials} of "
            f"{x.of} trials with a native stack (trial `{x.trial_id}`, crashing thread, innermost "
            f"frames):"
        )
        lines += ["", head, "", "```", x.text, "```"]
    return lines


def retired_lines(store_dir: Path, mine: Sequence[TrialResult], report_dir: Path) -> list[str]:
    """What `harness retire` took out of this matrix's count: how many records, why, and their
    failure families (they were observed, under a workload that has since changed)."""
    if not mine:
        return []
    fams = collections.Counter(families.family(r.signature_summary) for r in mine if r.outcome.is_failure)
    failed = ", ".join(f"{f} {n}" for f, n in sorted(fams.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"
    lines = [
        "",
        f"Retired (`python -m harness retire`; kept in `{_rel(store_dir / retire.RETIRED_NAME, report_dir)}`, "
        f"not in the tables above): {len(mine)} records of {len({r.cell for r in mine})} cells; failures by "
        f"family: {failed}. Why:",
        "",
    ]
    lines += [
        f"- {e['at'][:10]}, cells `{', '.join(e['cells'])}`, {e['records']} records: {e['reason']}"
        for e in retire.reasons(store_dir)
    ]
    return lines


def overview_body(loaded: Sequence[tuple[Path, Sequence[TrialResult]]]) -> str:
    """Failing trials per failure family and torch version over every store: which modes were
    seen on which version, and from which matrices (out-of-memory and harness errors left out)."""
    rows, totals = family_table(loaded)
    return "\n".join(
        [
            "#### Failure modes by torch version, over every store",
            "",
            "Regenerate with `python -m harness report`. Failing trials per failure family "
            "(`harness/diagnosis/families.py`) and torch version, with the matrices they came from; trials that "
            f"ran out of device memory, timed out or hit a harness error are left out; records taken out of a "
            f"matrix's count by `harness retire` are in (their failures were observed). Trials that count: {totals}.",
            "",
            *rows,
        ]
    )


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(Path(path).resolve(), Path(base).resolve()).replace(os.sep, "/")


def matrix_names(records: Sequence[TrialResult]) -> list[str]:
    return sorted({r.matrix for r in records if r.replay_of is None})


def summary_header(store_dir: Path) -> str:
    return (
        f"# `{store_dir.name}`: generated tables\n\n"
        f"Written by `python -m harness report`; edit nothing between the markers. The findings they "
        f"support are in [REPORT.md]({_rel(store_dir.parent.parent / 'REPORT.md', store_dir)}).\n\n"
    )


def stores_body(rows: Sequence[tuple[str, Path, Sequence[TrialResult]]], report_dir: Path) -> str:
    """One line per matrix: its trials, failures, torch versions and where its tables are."""
    lines = ["| matrix | trials | failing | torch | tables |", "|---|---|---|---|---|"]
    for name, store_dir, records in rows:
        failing = sum(r.outcome.is_failure for r in records)
        versions = ", ".join(sorted({r.torch_version for r in records if r.torch_version})) or "?"
        link = _rel(store_dir / SUMMARY_NAME, report_dir)
        lines.append(f"| `{name}` | {len(records)} | {failing} | {versions} | [{link}]({link}) |")
    return "\n".join(lines)


@dataclass
class _Pending:
    """What rebuild writes, gathered before anything is: texts, block names, plots to draw."""

    writes: list[tuple[Path, str]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    plots: list[tuple[Sequence[CellSummary], str, Path]] = field(default_factory=list)
    index: list[tuple[str, Path, Sequence[TrialResult]]] = field(default_factory=list)
    """(matrix, store folder, its records) for REPORT.md's index of stores."""


def rebuild(store_dirs: Sequence[Path], out: Path, *, overview: bool = False) -> list[str]:
    """Regenerate every store's SUMMARY.md (a block per matrix) and plots, the bench tables, and
    with `overview` REPORT.md's blocks over all stores (only meaningful for every store).

    Every store is read and every new text built before anything is written, so an unreadable
    store or broken markers leave all files as they were. Returns the block names written.
    """
    loaded = [(Path(d), Store(d).load()) for d in store_dirs]
    retired = {d: retire.retired_store(d).load() for d, _ in loaded}
    roots = sorted({Path(d).parent for d in store_dirs})
    bench_files = sorted(f for root in roots for f in bench_records.files(root))
    bench_runs = bench_records.load(bench_files)
    todo = _Pending()
    for store_dir, records in loaded:
        _add_store(todo, store_dir, records, retired[store_dir], bench_runs, out.parent)
    plots_dir = bench_files[0].parent / "plots" if bench_files else None
    bench_plots = benches.plot_paths(bench_runs, plots_dir) if plots_dir else []
    price_plots = benches.price_plots(bench_runs, plots_dir) if plots_dir else {}
    if bench_files:
        _add_benches(todo, roots[0] / BENCHES_NAME, bench_runs, bench_files, bench_plots, price_plots)
    repro_readme = out.parent / "repro" / "README.md"
    readme = _add_overview(todo, out, loaded, retired, repro_readme) if overview else None
    for cells, name, plots_at in todo.plots:
        write_plots(cells, name, plots_at)
    if bench_plots:
        benches.write_plots(bench_runs, bench_plots[0].parent)
    if price_plots:
        benches.write_price_plots(bench_runs, plots_dir)
    for path, text in todo.writes:
        write_atomic(path, text.encode("utf-8"))
    if readme is not None:
        write_atomic(repro_readme, readme.encode("utf-8"))
        todo.names.append(tables.REPROS_BLOCK)
    return todo.names


def _add_store(todo: _Pending, store_dir: Path, records, retired, bench_runs, root: Path) -> None:
    """The store's SUMMARY.md with a block per matrix, and the plots of each."""
    path = store_dir / SUMMARY_NAME
    text = path.read_text(encoding="utf-8") if path.exists() else summary_header(store_dir)
    for name in matrix_names(records):
        mine = [r for r in records if r.matrix == name and r.replay_of is None]
        cells = summarize(mine)
        paths = plot_paths(cells, name, store_dir / "plots")
        gone = [r for r in retired if r.matrix == name]
        body = block_body(name, store_dir, mine, cells, paths, store_dir, gone, bench_runs, root=root)
        text = replace_block(text, name, body)
        todo.plots.append((cells, name, store_dir / "plots"))
        todo.names.append(name)
        todo.index.append((name, store_dir, mine))
    todo.writes.append((path, text))


def _add_benches(todo: _Pending, doc: Path, bench_runs, bench_files, bench_plots, price_plots) -> None:
    """BENCHES.md's block: the bench tables, linking their files and plots."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else BENCHES_HEADER
    body = benches.body(
        bench_runs,
        [_rel(f, doc.parent) for f in bench_files],
        [_rel(p, doc.parent) for p in bench_plots],
        {k: _rel(p, doc.parent) for k, p in price_plots.items()},
    )
    todo.writes.append((doc, replace_block(text, benches.BLOCK, body)))
    todo.names.append(benches.BLOCK)


def _add_overview(todo: _Pending, out: Path, loaded, retired, repro_readme: Path) -> str | None:
    """FAILURE-MODES.md and REPORT.md's blocks over every store; the repro README's new text, if
    there is one."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Report\n"
    # Retired records count here: their failures were observed (under an older workload).
    observed = loaded + list(retired.items())
    modes = out.parent / "results" / FAILURE_MODES_NAME
    modes_text = (
        modes.read_text(encoding="utf-8")
        if modes.exists()
        else (
            "# Failure modes by torch version\n\nWritten by `python -m harness report`; the findings are in "
            f"[REPORT.md]({_rel(out, modes.parent)}).\n\n"
        )
    )
    todo.writes.append((modes, replace_block(modes_text, OVERVIEW_BLOCK, overview_body(observed))))
    docs = {out: text, **{p: p.read_text(encoding="utf-8") for p in sorted((out.parent / FINDINGS).glob("*.md"))}}
    bodies = {
        tables.RACES_BLOCK: lambda _: tables.race_table(records_of=RecordSource(out.parent)),
        STORES_BLOCK: lambda where: stores_body(todo.index, where),
        versions.BLOCK: lambda _: versions.body(loaded),
    }
    for name, body in bodies.items():
        # The block goes where its markers are: REPORT, or the evidence page it moved to.
        path = next((p for p, t in docs.items() if begin_marker(name) in t), out)
        docs[path] = replace_block(docs[path], name, body(path.parent))
    todo.names += [OVERVIEW_BLOCK, *bodies]
    todo.writes += list(docs.items())
    if not repro_readme.is_file():
        return None
    return replace_block(repro_readme.read_text(encoding="utf-8"), tables.REPROS_BLOCK, tables.repro_table())
