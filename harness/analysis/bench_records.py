"""The record format of `dflash bench` runs, one configuration alone on the machine.

A campaign trial shares the GPU with other trials and its tokens/s move with its neighbours (one
gpu-bound cell of the H200 campaign ran 9,882-42,922 tokens/s); a bench runs alone, so costs come
from here. Ratios are taken only between benches of one GPU host's run: the same bench moved 18-22%
from one run to another.
A record is the bench's JSON line plus the phase it ran under (`bench:PRESET:FIXES[:MODE[:GPUS]]`,
as tools/h200_run.sh names it; GPUS runs the seed trainer's device plan on that many GPUs) and
the run's number, kept as JSONL beside the stores (`results/<folder>/bench-<date>.jsonl` or
`benches.jsonl`), taken from the run's log by

    python -m harness benches LOG RUN --into results/h200-campaign/benches.jsonl

(run by tools/unpack_run.sh) and tabled by `python -m harness report` (harness.analysis.benches).
A bench that died is a record too, with its exit code and failure signature and no figures: the
configuration failed alone on the GPU, which harness.analysis.verdicts counts against it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.runtime.errors import UserInputError
from harness.stores.store import write_atomic
from harness.trial.signature import crash_signature

PHASE_LINE = re.compile(r"^== phase (\S+) at \d+s$")
RC_LINE = re.compile(r"^bench \S+ .*\brc=(\d+) \d+s$")
"""h200_run.sh's line after each bench: `bench PRESET FIXES rc=N SECONDSs`."""
TIMEOUT_RCS = (124, 137)
"""`timeout`'s exit codes: the bench ran past h200_run.sh's limit (a hang, or a slow compile)."""
DEFAULT_MODE = "reduce-overhead"
"""h200_run.sh's bench phase compiles with this mode when the phase names none."""


class BenchError(UserInputError):
    """Bad input: one line, nothing written."""


@dataclass(frozen=True, slots=True)
class Bench:
    host_run: int | None
    """The number of the GPU-host run that benched it (the record's `call` field); None outside them."""
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
    GPU is not clean, whatever its matrix cells say (harness.analysis.verdicts): a cell clean at
    29 stressed trials has died of F2 in a bench."""
    signature: str | None = None
    """The died bench's failure (harness.trial.signature's summary of the stderr tail h200_run.sh prints)."""
    round: int | None = None
    """The round of a `harness price` run (its benches are priced per round: harness.analysis.prices)."""
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
        return died(self.exit_code)

    @property
    def timed_out(self) -> bool:
        return timed_out(self.exit_code)


def died(exit_code: int | None) -> bool:
    """A bench that died of an error. One past its time limit is not counted as one: it was still
    running (the matrix leaves TIMEOUT out of k/n alike)."""
    return bool(exit_code) and not timed_out(exit_code)


def timed_out(exit_code: int | None) -> bool:
    return exit_code in TIMEOUT_RCS


def strategy_of(phase: str) -> tuple[str, str]:
    """(preset, strategy) of a phase `bench:PRESET:FIXES[:MODE[@DRAFTERS][:GPUS]]` (`@N`: N drafter
    threads, named `STRATEGY@N`)."""
    parts = phase.split(":")
    if (
        len(parts) < 3
        or len(parts) > 5
        or parts[0] != "bench"
        or not parts[1]
        or (len(parts) == 5 and not parts[4].isdigit())
    ):
        raise BenchError(f"not a bench phase: {phase!r} (want bench:PRESET:FIXES[:MODE[:GPUS]])")
    # `--set fixes=` takes commas, the campaign's cells join with `+`: one name for one cell.
    preset, fixes = parts[1], parts[2].replace(",", "+")
    mode, at, drafters = (parts[3] if len(parts) > 3 else "").partition("@")
    if at and not drafters.isdigit():
        raise BenchError(f"not a bench phase: {phase!r} (@ takes a drafter thread count)")
    mode = mode or DEFAULT_MODE
    if mode == "none":
        # Fixes under eager (a lock's own cost, `harness price`) name a configuration of their own.
        name = f"eager+{fixes}" if fixes else "eager"
    elif mode == "default":
        name = "no-cudagraphs" if not fixes else f"no-cudagraphs+{fixes}"
    else:
        name = fixes or "raw"
    return preset, f"{name}@{drafters}" if at else name


def parse_log(text: str, host_run: int) -> list[dict]:
    """The bench records of one GPU-host run's log, each with its phase and the run's number (field
    `call`). A bench that died (h200_run.sh's `rc=N`, N != 0, and no record) gives a record with its
    exit code and the signature of what h200_run.sh printed after it, up to the next `== ` line: the evidence that the
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
            died = {"phase": phase, "call": host_run, "event": "bench", "exit_code": int(rc.group(1))}
            tail, phase = [], None
            continue
        if line.startswith('{"event": "bench"'):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            out.append({"phase": phase, "call": host_run, **data})
            phase = None  # one record per phase
    close()
    return out


def died_signature(lines: Sequence[str], exit_code: int) -> str:
    """What a died bench failed of, from the output h200_run.sh printed after its `rc=` line: the end
    of its stderr, where a traceback's header may have been cut off (h200_run.sh prints a tail), so the
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
            benches.append(
                Bench(
                    host_run=d.get("call"),
                    preset=preset,
                    strategy=strategy,
                    steps=d.get("steps"),
                    tokens_steady=d.get("tokens_per_s_steady"),
                    gpu_busy=d.get("gpu_busy"),
                    gpu_busy_steady=d.get("gpu_busy_steady"),
                    busy=d.get("busy") or {},
                    torch=d.get("torch", "?"),
                    gpus=plan_gpus(d.get("device_plan")),
                    exit_code=int(d.get("exit_code") or 0),
                    signature=d.get("signature"),
                    round=d.get("round"),
                    run=d.get("run"),
                    sets=tuple(d.get("sets") or ()),
                    source=path,
                )
            )
    return benches


def plan_gpus(plan: dict | None) -> int:
    """Distinct CUDA devices of a bench's device plan ({"target": ["cuda:0", ...], "drafter": [...]});
    0 for a plan on the CPU; 1 for records without a plan (the first H200 runs' benches)."""
    if not isinstance(plan, dict):
        return 1
    return len(
        {d for devices in plan.values() if isinstance(devices, list) for d in devices if str(d).startswith("cuda")}
    )


def files(results_root: Path) -> list[Path]:
    """The GPU-host runs' bench files: `bench-<date>.jsonl` (the first, kept by hand) and
    `benches.jsonl` (what unpack_run.sh appends to). Other bench outputs (a CPU run's `bench.jsonl`
    has no phase) are not in this format."""
    return sorted([*results_root.glob("*/bench-*.jsonl"), *results_root.glob("*/benches.jsonl")])


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


def add(log: Path, host_run: int, into: Path) -> int:
    """Append the log's bench records to `into`, skipping those of a run and phase already there;
    returns how many were added."""
    try:
        found = parse_log(log.read_text(encoding="utf-8", errors="replace"), host_run)
    except OSError as e:
        raise BenchError(f"cannot read {log}: {e.strerror or e}") from None
    held = read_records(into) if into.exists() else []
    seen = {(d.get("call"), d.get("phase")) for d in held}
    new = [d for d in found if (d["call"], d["phase"]) not in seen]
    if new:
        append(into, new, held)
    return len(new)


def add_records(records: Path | Sequence[dict], host_run: int, into: Path) -> int:
    """Append `harness price` records (its --into file, written on the GPU host without a run
    number, or those records read already) to `into`, stamped with `host_run` (field `call`); a
    record already there (same price run, phase and round: one bench) is skipped, so that unpacking
    a run twice adds nothing, nor does a resumed price run's copy of the benches an earlier host run
    kept (`harness price --resume`)."""
    found = read_records(records) if isinstance(records, Path) else records
    held = read_records(into) if into.exists() else []

    def bench(d: dict, call: int | None) -> tuple:
        return (
            (d.get("run"), d.get("phase"), d.get("round")) if d.get("run") else (call, d.get("phase"), d.get("round"))
        )

    seen = {bench(d, d.get("call")) for d in held}
    new = [{**d, "call": host_run} for d in found if bench(d, host_run) not in seen]
    if new:
        append(into, new, held)
    return len(new)
