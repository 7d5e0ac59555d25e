"""Bench records of the device calls: `dflash bench` runs one configuration alone on the GPU.

A campaign trial shares the GPU with other trials and its tokens/s move with its neighbours (one
gpu-bound cell ran 9,882-42,922 tokens/s, REPORT.md 2026-11-30 sixth session); a bench runs alone,
so costs come from here. Ratios are taken only between benches of one call: the same bench moved
18-22% between calls 9 and 11.

Records are the bench's JSON line plus the call's phase (`bench:PRESET:FIXES[:MODE[:GPUS]]`, as
tools/h200_call.sh, call.sh below, names it; GPUS runs the seed topology of issue 6 on that many GPUs) and the call number, kept as JSONL beside the stores
(`results/<folder>/bench-<date>.jsonl` or `benches.jsonl`), taken from a call's log by

    python -m harness.analysis.benches LOG CALL --into results/h200-campaign/benches.jsonl

(run by tools/unpack_call.sh), and tabled by `python -m harness report` in REPORT.md's `benches` block.
A bench that died is a record too, with its exit code and failure signature and no figures: the
configuration failed alone on the GPU, which harness.analysis.recommend counts against it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.diagnosis import families
from harness.analysis.recommend import serialised
from harness.trial.signature import crash_signature
from harness.stores.store import write_atomic

BLOCK = "benches"
PHASE_LINE = re.compile(r"^== phase (\S+) at \d+s$")
RC_LINE = re.compile(r"^bench \S+ .*\brc=(\d+) \d+s$")
"""call.sh's line after each bench: `bench PRESET FIXES rc=N SECONDSs`."""
TIMEOUT_RCS = (124, 137)
"""`timeout`'s exit codes: the bench ran past call.sh's limit (a hang, or a slow compile)."""
DEFAULT_MODE = "reduce-overhead"
"""call.sh's bench phase compiles with this mode when the phase names none."""


class BenchError(ValueError):
    """Bad input: one line, nothing written."""


@dataclass(frozen=True, slots=True)
class Bench:
    call: int | None
    preset: str
    strategy: str
    """The campaign's cell naming: `eager` (mode none), `no-cudagraphs+FIXES` (mode default), else
    the fixes (`raw` without any)."""
    steps: int | None
    tokens_steady: float | None
    gpu_busy: float | None
    gpu_busy_steady: float | None
    busy: dict
    torch: str
    gpus: int = 1
    """Devices in the bench's device plan: a verdict is priced only by benches on as many GPUs as
    its workload's trials took (a 4-GPU topology cell is not costed by a one-GPU bench)."""
    exit_code: int = 0
    """Non-zero for a bench that died (it has no figures): a configuration that failed alone on the
    GPU is not clean, whatever its matrix cells say (harness.analysis.recommend; REPORT.md, tenth session:
    a cell clean at 29 stressed trials died of F2 in a bench)."""
    signature: str | None = None
    """The died bench's failure (harness.trial.signature's summary of the stderr tail call.sh prints)."""
    round: int | None = None
    """The round of a `harness price` run (its benches are priced per round: harness.analysis.pricing)."""
    run: str | None = None
    """Which `harness price` run (its start time): rounds pair only within one."""
    sets: tuple[str, ...] = ()
    """The run's `--set` overrides (a device plan, a thread count): part of what was priced."""
    source: Path | None = field(default=None, compare=False)
    """The file it was loaded from: its plots go beside it (results/<folder>/plots)."""

    @property
    def where(self) -> str:
        return f"{self.gpus} GPU(s)" if self.gpus else "CPU"

    @property
    def failed(self) -> bool:
        """Died of an error. A bench past call.sh's limit is not counted as one: call 6's ran out of
        time in its second round, still running (the matrix leaves TIMEOUT out of k/n alike)."""
        return self.exit_code != 0 and not self.timed_out

    @property
    def timed_out(self) -> bool:
        return self.exit_code in TIMEOUT_RCS


def strategy_of(phase: str) -> tuple[str, str]:
    """(preset, strategy) of a phase `bench:PRESET:FIXES[:MODE[:GPUS]]`."""
    parts = phase.split(":")
    if (len(parts) < 3 or len(parts) > 5 or parts[0] != "bench" or not parts[1]
            or (len(parts) == 5 and not parts[4].isdigit())):
        raise BenchError(f"not a bench phase: {phase!r} (want bench:PRESET:FIXES[:MODE[:GPUS]])")
    # `--set fixes=` takes commas, the campaign's cells join with `+`: one name for one cell.
    preset, fixes = parts[1], parts[2].replace(",", "+")
    mode = parts[3] if len(parts) > 3 and parts[3] else DEFAULT_MODE
    if mode == "none":
        # Fixes under eager (a lock's own cost, `harness price`) name a configuration of their own.
        return preset, f"eager+{fixes}" if fixes else "eager"
    name = fixes or "raw"
    if mode == "default":
        name = "no-cudagraphs" if not fixes else f"no-cudagraphs+{fixes}"
    return preset, name


def parse_log(text: str, call: int) -> list[dict]:
    """The bench records of one call's log, each with its phase and the call number. A bench that
    died (call.sh's `rc=N`, N != 0, and no record) gives a record with its exit code and the
    signature of what call.sh printed after it, up to the next `== ` line: the evidence that the
    configuration failed alone on the GPU."""
    out: list[dict] = []
    phase: str | None = None
    died: dict | None = None
    tail: list[str] = []

    def close() -> None:
        nonlocal died
        if died is not None:
            died["signature"] = died_signature(tail, died["exit_code"])
            out.append(died)
            died = None

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("== "):
            # Any `== ` line (a phase, the end of the phases) ends what came before it: a record
            # printed under another phase is not a bench's.
            close()
            m = PHASE_LINE.match(stripped)
            phase = m.group(1) if m and m.group(1).startswith("bench:") else None
            continue
        if died is not None:
            tail.append(line)
            continue
        if phase is None:
            continue
        rc = RC_LINE.match(stripped)
        if rc and int(rc.group(1)) != 0:
            died, tail, phase = {"phase": phase, "call": call, "event": "bench", "exit_code": int(rc.group(1))}, [], None
            continue
        if line.startswith('{"event": "bench"'):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            out.append({"phase": phase, "call": call, **data})
            phase = None      # one record per phase
    close()
    return out


def died_signature(lines: Sequence[str], exit_code: int) -> str:
    """What a died bench failed of, from the output call.sh printed after its `rc=` line: the end of
    its stderr, where a traceback's header may have been cut off (call.sh prints a tail), so the
    frames from the first `File "..."` line on are read as one."""
    if exit_code in TIMEOUT_RCS:
        return f"timed out (exit {exit_code})"
    text = "\n".join(lines)
    if "Traceback (most recent call last):" not in text:
        first = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith('File "')), None)
        if first is not None:
            text = "Traceback (most recent call last):\n" + "\n".join(lines[first:])
    sig = crash_signature(text, rc=exit_code)
    return sig.summary if sig is not None else f"exit {exit_code}"


def load(paths: Sequence[Path]) -> list[Bench]:
    benches = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                preset, strategy = strategy_of(d["phase"])
            except (ValueError, KeyError, TypeError) as e:
                raise BenchError(f"{path} line {n}: not a bench record ({e})") from None
            benches.append(Bench(call=d.get("call"), preset=preset, strategy=strategy, steps=d.get("steps"),
                                 tokens_steady=d.get("tokens_per_s_steady"), gpu_busy=d.get("gpu_busy"),
                                 gpu_busy_steady=d.get("gpu_busy_steady"), busy=d.get("busy") or {},
                                 torch=d.get("torch", "?"), gpus=plan_gpus(d.get("device_plan")),
                                 exit_code=int(d.get("exit_code") or 0), signature=d.get("signature"),
                                 round=d.get("round"), run=d.get("run"), sets=tuple(d.get("sets") or ()),
                                 source=path))
    return benches


def plan_gpus(plan: dict | None) -> int:
    """Distinct CUDA devices of a bench's device plan ({"target": ["cuda:0", ...], "drafter": [...]});
    0 for a plan on the CPU; 1 for records without a plan (the device calls' first benches)."""
    if not isinstance(plan, dict):
        return 1
    return len({d for devices in plan.values() if isinstance(devices, list) for d in devices
                if str(d).startswith("cuda")})


def files(results_root: Path) -> list[Path]:
    """The device calls' bench files: `bench-<date>.jsonl` (the first, kept by hand) and
    `benches.jsonl` (what unpack.sh appends to). Other bench outputs (a CPU run's `bench.jsonl`
    has no phase) are not this table's."""
    return sorted([*results_root.glob("*/bench-*.jsonl"), *results_root.glob("*/benches.jsonl")])


def _ratio(b: Bench, base: Bench | None) -> str:
    if base is None or not base.tokens_steady or b.tokens_steady is None:
        return "-"
    return f"{b.tokens_steady / base.tokens_steady:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def plot_paths(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    """One plot per preset and GPU count with benches from more than one call: the drift between
    calls (~20%) and the ratios within one are easier seen than read off the table."""
    return [path for path, *_ in _plotted(benches, plots_dir)]


def _plotted(benches: Sequence[Bench], plots_dir: Path) -> list[tuple[Path, str, int, list[Bench]]]:
    """(plot path, preset, GPU count, its benches by call) for each group plot_paths names."""
    groups: dict[tuple[str, int], list[Bench]] = {}
    # A `harness price` run is its table (priced()), not a dozen bars of one call.
    for b in sorted((b for b in benches if b.round is None), key=lambda b: (b.call or 0, b.strategy)):
        groups.setdefault((b.preset, b.gpus), []).append(b)
    return [((group[0].source.parent / "plots" if group[0].source else plots_dir) / f"benches-{preset}-{gpus}gpu.png",
             preset, gpus, group)
            for (preset, gpus), group in sorted(groups.items()) if len({b.call for b in group}) > 1]


def _bar_text(b: Bench) -> str:
    if b.failed:
        return f"died: {families.family(b.signature)}"
    if b.timed_out:
        return "timed out"
    return "-" if b.tokens_steady is None else f"{b.tokens_steady:.0f}"


def write_plots(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    """The plot_paths: steady tokens/s per bench, one bar per call and configuration; a bench that
    died is a red bar of length 0 with its family, one that timed out a grey one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR
    from harness.analysis.plots import bar_plot as _bar_plot

    paths = []
    for path, preset, gpus, group in _plotted(benches, plots_dir):
        colors = [FAILED_COLOR if b.failed else "#999999" if b.timed_out else CLEAN_COLOR for b in group]
        paths.append(_bar_plot(plt, path, [f"call {b.call}: {b.strategy}" for b in group],
                               [b.tokens_steady or 0.0 for b in group], None,
                               "tokens/s, steady half, alone on the GPU (ratios hold within a call only)",
                               f"dflash bench, {preset}, {group[0].where}", [_bar_text(b) for b in group],
                               colors=colors))
    return paths


def body(benches: Sequence[Bench], sources: Sequence[str], plots: Sequence[str] = (),
         price_links: dict[tuple, str] | None = None) -> str:
    """REPORT.md's `benches` block: one row per bench, ratios within its call and preset; a
    `harness price` run's benches as one table per run, each with its plot (priced())."""
    lines = ["#### Benches alone on the machine (`dflash bench`: the GPU, or the CPU where GPUs says CPU)", "",
             f"Regenerate with `python -m harness report` from {', '.join(f'`{s}`' for s in sources) or 'no files'}. "
             "tok/s is the steady second half of the run; vs lock is against the fastest serialised "
             "(`global-lock`) bench of the same call, preset and GPU count, vs eager against its eager bench; GPU busy is "
             "nvidia-smi's utilisation over the whole run (compiles included) and over the steady half; stage "
             "busy is the fraction of wall time the drafter / target threads worked.", "",
             "| call | preset | GPUs | strategy | steps | tok/s | vs lock | vs eager | GPU busy | GPU busy steady "
             "| busy drafter / target | torch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # A `harness price` run's benches are summarised per run below (paired by round), not row by row.
    ran = [b for b in benches if not b.exit_code and b.round is None]
    for b in sorted(ran, key=lambda b: (b.call or 0, b.preset, b.gpus, b.strategy)):
        peers = [p for p in ran if p.call == b.call and p.preset == b.preset and p.gpus == b.gpus]
        locks = [p for p in peers if serialised(p.strategy) and p.tokens_steady]
        lock = max(locks, key=lambda p: p.tokens_steady) if locks else None
        eager = next((p for p in peers if p.strategy == "eager"), None)
        tok = "-" if b.tokens_steady is None else f"{b.tokens_steady:.0f}"
        stage = f"{b.busy.get('drafter', 0):.2f} / {b.busy.get('target', 0):.2f}" if b.busy else "-"
        lines.append(f"| {b.call if b.call is not None else '?'} | {b.preset} | {b.gpus or 'CPU'} | {b.strategy} | {b.steps or '-'} "
                     f"| {tok} | {_ratio(b, lock)} | {_ratio(b, eager)} | {_pct(b.gpu_busy)} "
                     f"| {_pct(b.gpu_busy_steady)} | {stage} | {b.torch} |")
    died = sorted((b for b in benches if b.exit_code and b.round is None), key=lambda b: (b.call or 0, b.preset, b.gpus, b.strategy))
    if died:
        lines += ["", "Benches that did not finish (no figures). One that died of an error failed alone on "
                  "the GPU, and harness.analysis.recommend does not recommend its configuration; one that timed "
                  "out is not counted either way:", ""]
        lines += [f"- call {b.call if b.call is not None else '?'}, {b.preset}, {b.where}, `{b.strategy}`: "
                  + (f"exit {b.exit_code}, family {families.family(b.signature)}: `{b.signature}`" if b.failed
                     else f"{b.signature}")
                  for b in died]
    lines += priced(benches, price_links)
    if plots:
        lines += [""] + [f"![{Path(p).stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class PriceRun:
    """The benches of one `harness price` run (call, run id, preset, GPU count), in run order."""
    call: int | None
    run: str
    preset: str
    group: tuple[Bench, ...]

    @property
    def name(self) -> str:
        """`call N`, or for a run outside the device calls (no --call) its start."""
        return f"call {self.call}" if self.call is not None else f"call ? (run of {self.run})"

    @property
    def order(self) -> list[str]:
        """Its configurations, the base (the first its first round benched) first."""
        return list(dict.fromkeys(b.strategy for b in sorted(self.group, key=lambda b: b.round)))

    def prices(self) -> list:
        from harness.analysis.pricing import Run, price_runs

        runs = [Run(strategy=b.strategy, round=b.round, tokens=None if b.exit_code else b.tokens_steady,
                    died=b.signature if b.failed else None, gpu_busy=b.gpu_busy_steady) for b in self.group]
        return price_runs(runs, self.order)

    @property
    def key(self) -> tuple:
        return (self.call, self.run, self.preset, self.group[0].gpus)

    @property
    def plottable(self) -> bool:
        """Two rounds or more of two configurations or more: something to compare per round."""
        return len({b.round for b in self.group}) > 1 and len(self.order) > 1

    def plot_path(self, plots_dir: Path) -> Path:
        """Beside its bench file; named by call and run start, so two runs of one call (another
        `--set`) do not share a file."""
        b = self.group[0]
        stamp = "-".join(x for x in (str(self.call) if self.call is not None else "", re.sub(r"\D", "", self.run)[:14]) if x)
        where = f"{b.gpus}gpu" if b.gpus else "cpu"
        return (b.source.parent / "plots" if b.source else plots_dir) / f"price-{self.preset}-{where}-{stamp}.png"


def price_groups(benches: Sequence[Bench]) -> list[PriceRun]:
    """The `harness price` runs among the benches (those with rounds), by call and start."""
    groups: dict[tuple, list[Bench]] = {}
    for b in benches:          # file order is run order: the first bench of a group is its base
        if b.round is not None:
            groups.setdefault((-1 if b.call is None else b.call, b.run or "", b.preset, b.gpus), []).append(b)
    return [PriceRun(call=None if call == -1 else call, run=run, preset=preset, group=tuple(group))
            for (call, run, preset, _), group in sorted(groups.items())]


def priced(benches: Sequence[Bench], links: dict[tuple, str] | None = None) -> list[str]:
    """Per `harness price` run: the paired prices against the configuration its first round benched
    first, and its plot where one was drawn (`links`: PriceRun.key -> REPORT.md's link)."""
    from harness.analysis.pricing import rows

    out = []
    for pr in price_groups(benches):
        b = pr.group[0]
        rounds = len({x.round for x in pr.group})
        where = b.where + (f", `--set {' '.join(b.sets)}`" if b.sets else "")
        out += ["", f"Priced in rounds (`harness price`), {pr.name}, {pr.preset}, {where}: {rounds} round(s), "
                f"alternating order; the ratio is each round's tokens/s over `{pr.order[0]}`'s, its median and the "
                "median's interval (sign test), with the interval's coverage:", "", *rows(pr.prices())]
        link = (links or {}).get(pr.key)
        if link:
            out += ["", f"![{Path(link).stem}]({link})"]
    return out


def price_plots(benches: Sequence[Bench], plots_dir: Path) -> dict[tuple, Path]:
    """PriceRun.key -> its plot, one per `harness price` run of two rounds or more of two
    configurations or more: each round's ratio to the base as a dot, the median and its interval,
    beside 1.0 (a reader sees at once whether the rounds agree)."""
    return {pr.key: pr.plot_path(plots_dir) for pr in price_groups(benches) if pr.plottable}


def write_price_plots(benches: Sequence[Bench], plots_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.analysis.pricing import paired_ratios
    from harness.analysis.plots import CLEAN_COLOR, FAILED_COLOR, png_figure

    paths = []
    for pr in price_groups(benches):
        if not pr.plottable:
            continue
        ps = pr.prices()
        base, others = ps[0], ps[1:]
        ratios = {p.strategy: paired_ratios(p, base) for p in others}
        longest = max((len(p.strategy) for p in others), default=10)
        path = pr.plot_path(plots_dir)
        with png_figure(plt, path, (5.5 + 0.058 * longest, max(2.2, 0.45 * len(others) + 1.4))) as ax:
            for y, p in enumerate(others):
                ax.scatter(ratios[p.strategy], [y] * len(ratios[p.strategy]), color=CLEAN_COLOR, s=18, zorder=3)
                if p.ratio is not None:
                    ax.plot([p.ratio.low, p.ratio.high], [y, y], color="black", linewidth=1.2, zorder=2)
                    ax.plot([p.ratio.median], [y], marker="|", markersize=16, color="black", zorder=4)
                    ax.annotate(f"{p.ratio.median:.2f}x ({p.ratio.coverage:.0%})", (p.ratio.high, y),
                                xytext=(6, 4), textcoords="offset points", fontsize=7)
                if p.died:
                    ax.annotate(f"died {len(p.died)}x", (1.0, y), xytext=(6, -10), textcoords="offset points",
                                fontsize=7, color=FAILED_COLOR)
            ax.axvline(1.0, color="#999999", linestyle="--", linewidth=1)
            xs = [1.0, *(x for rs in ratios.values() for x in rs)]
            span = max(max(xs) - min(xs), 0.05)
            ax.set_xlim(min(xs) - 0.05 * span, max(xs) + 0.3 * span)   # room for the median's label
            ax.set_yticks(range(len(others)))
            ax.set_yticklabels([p.strategy for p in others], fontsize=7)
            ax.set_ylim(len(others) - 0.5, -0.5)
            ax.set_xlabel("ratio per round (dots); median (|) and its interval (line)", fontsize=8)
            sets = f", --set {' '.join(pr.group[0].sets)}" if pr.group[0].sets else ""
            ax.set_title(f"harness price, {pr.name}, {pr.preset}, {pr.group[0].where}{sets}\n"
                         f"tokens/s over `{base.strategy}`", fontsize=8)
        paths.append(path)
    return paths


def read_records(path: Path) -> list[dict]:
    """A bench file's records, checked by load() first: a file that is not ours is a BenchError
    before anything is written."""
    try:
        load([path])
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as e:
        raise BenchError(f"cannot read {path}: {e.strerror or e}") from None


def append(into: Path, new: Sequence[dict], held: Sequence[dict] | None = None) -> None:
    """`into`'s records (`held`, when the caller read them already) and then `new`, written whole and
    atomically (never half a file)."""
    if held is None:
        held = read_records(into) if into.exists() else []
    write_atomic(into, "".join(json.dumps(d) + "\n" for d in [*held, *new]).encode("utf-8"))


def add(log: Path, call: int, into: Path) -> int:
    """Append the log's bench records to `into`, skipping those of a call and phase already there;
    returns how many were added."""
    try:
        found = parse_log(log.read_text(encoding="utf-8", errors="replace"), call)
    except OSError as e:
        raise BenchError(f"cannot read {log}: {e.strerror or e}") from None
    held = read_records(into) if into.exists() else []
    seen = {(d.get("call"), d.get("phase")) for d in held}
    new = [d for d in found if (d["call"], d["phase"]) not in seen]
    if new:
        append(into, new, held)
    return len(new)


def add_records(records: Path | Sequence[dict], call: int, into: Path) -> int:
    """Append `harness price` records (its --into file, written on the device without a call
    number, or those records read already) to `into`, stamped with `call`; a record already there
    (same call, run, phase and round) is skipped, so that unpacking a call twice adds nothing."""
    found = read_records(records) if isinstance(records, Path) else records
    held = read_records(into) if into.exists() else []
    seen = {(d.get("call"), d.get("run"), d.get("phase"), d.get("round")) for d in held}
    new = [{**d, "call": call} for d in found if (call, d.get("run"), d.get("phase"), d.get("round")) not in seen]
    if new:
        append(into, new, held)
    return len(new)
