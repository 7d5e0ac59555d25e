"""`python -m harness show TRIAL_ID`: one stored trial, readable: what ran, how it ended, which
failure mode that is, the first failing thread's traceback, the native crash site, the hang dump,
and the commands that rerun or shrink it.

Everything comes from the store (the record and the artefacts the runner kept); a store whose
artefacts were not kept still shows the record and, through the matrix spec, what ran. Nothing
is rerun.
"""

from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path

from harness.campaign.replay import ReplayError, load_trial_spec
from harness.diagnosis import families
from harness.stores.retire import RETIRED_NAME, reasons
from harness.stores.store import ArtefactPath, PackedArtefacts, Store
from harness.trial import hangs, native, signature, tracebacks
from harness.trial.folder import NATIVE_STACK, OUTPUT, PYSPY
from harness.trial.outcome import TrialResult
from harness.trial.spec import TrialSpec

TRACEBACK_FRAMES = 8
NATIVE_FRAMES = 10


def render(record: TrialResult, store_dir: Path) -> str:
    art = Store(store_dir).artefacts_of(record)
    try:
        spec: TrialSpec | None = load_trial_spec(record, store_dir)
    except ReplayError:
        spec = None
    out = [f"{record.trial_id}: {record.outcome.name}" + (f" ({record.detail})" if record.detail else "")]
    out.append(_ran_line(record))
    if store_dir.name == RETIRED_NAME:
        out.append(_retired_line(record, store_dir))
    if spec is not None:
        out += _spec_lines(spec)
    out += _signature_lines(record)
    text = _read(art / OUTPUT) if art else None
    out += _traceback_lines(tracebacks.parse_tracebacks(text) if text else [])
    out += _native_and_hang_lines(art)
    where = (art.file if isinstance(art, PackedArtefacts) else art) if art and art.is_dir() else None
    out += ["", f"artefacts: {where or 'not kept in this store'}"]
    if spec is not None:
        out += _command_lines(record, spec, store_dir)
    return "\n".join(out)


def _ran_line(record: TrialResult) -> str:
    """How long it ran, its speed and memory, and on what torch, Python, host and GPU."""
    return (
        f"  ran {record.duration_s:.1f} s"
        + (f", failed after {record.time_to_failure_s:.1f} s" if record.time_to_failure_s is not None else "")
        + (f", {record.tokens_per_s:,.0f} tokens/s" if record.tokens_per_s else "")
        + _held(record)
        + f"; torch {record.torch_version or '?'}, Python {record.python or '?'}, host "
        f"{record.host or '?'}"
        + (f", GPU {record.gpu}" if record.gpu else "")
        + f", started {record.started_at or '?'}"
    )


def _retired_line(record: TrialResult, store_dir: Path) -> str:
    mine = [
        e["reason"] for e in reasons(store_dir.parent) if any(fnmatch.fnmatchcase(record.cell, g) for g in e["cells"])
    ]
    why = "; ".join(mine) or "no reason recorded"
    return f"  retired from {store_dir.parent} (not counted there): {why}"


def _spec_lines(spec: TrialSpec) -> list[str]:
    plan = spec.plan
    planned = (
        f"{plan.get('profile')} seed {plan.get('seed')}, {len(plan.get('rules', []))} rules, "
        f"switch interval {plan.get('switch_interval') or 'default'}"
        if plan
        else "none"
    )
    return [
        f"  workload: {spec.workload.kind} {shlex.join(spec.workload.argv)}",
        f"  fixes: {'as is' if spec.fixes is None else ', '.join(spec.fixes) or 'none'}; plan: " + planned,
    ]


def _signature_lines(record: TrialResult) -> list[str]:
    if not record.signature:
        return []
    fam = families.family(record.signature_summary)
    return [
        "",
        f"signature {record.signature} (v{record.signature_version}):",
        f"  {record.signature_summary}",
        f"  family {fam}: {families.DESCRIPTIONS.get(fam, 'no known family: a new way to fail')}",
    ]


def _traceback_lines(tbs: list) -> list[str]:
    """The first failing thread's traceback, innermost frames first."""
    first = tracebacks.primary_traceback(tbs)
    if first is None:
        return []
    out = ["", f"first failure, thread {first.thread or '?'} (innermost first):"]
    out += [f"  {f.filename}:{f.line} in {f.name}" for f in first.frames[:TRACEBACK_FRAMES]]
    if len(first.frames) > TRACEBACK_FRAMES:
        out.append(f"  ... {len(first.frames) - TRACEBACK_FRAMES} more")
    message = first.message.splitlines()[:3]
    out.append(f"  {first.exc_type}: {message[0] if message else ''}".rstrip())
    return out + [f"    {m}" for m in message[1:]]


def _native_and_hang_lines(art) -> list[str]:
    """The kept native crash site and the py-spy hang dump, where the store kept them."""
    out = []
    kept = _read(art / NATIVE_STACK) if art else None
    if kept:
        site, frames = native.kept_summary(kept, NATIVE_FRAMES)
        out += ["", f"native crash site: {site} (crashing thread, innermost first):"]
        out += [f"  {line}" for line in frames.splitlines()]
    dump = art / PYSPY if art else None
    if dump is not None and dump.is_file():
        out += ["", "hang dump (py-spy; the threads the hang key is built from):"]
        excerpt = hangs.excerpt(hangs.read_pyspy_json(dump), keep=signature.in_hang_key)
        out += [f"  {line}" for line in excerpt.rstrip().splitlines()]
    return out


def _command_lines(record: TrialResult, spec: TrialSpec, store_dir: Path) -> list[str]:
    quoted = shlex.quote(record.trial_id)
    store_arg = f" --store {shlex.quote(str(store_dir))}"
    out = [f"rerun it: python -m harness replay {quoted}{store_arg} -n 10"]
    if spec.plan is not None and record.outcome.is_failure:
        out.append(f"what its plan needs: python -m harness shrink {quoted}{store_arg} -n 5")
    return out


def _held(record: TrialResult) -> str:
    """Both memory figures: the runner's nvidia-smi samples (a lower bound: a 2-s sample can miss a
    short peak) and the allocator's own peak (without the CUDA context), which can differ by GiB
    either way (fourteenth REPORT entry)."""
    sampled, reported = record.gpu_mem_gib, record.reported_gpu_peak_gib
    if sampled is None and reported is None:
        return ""
    if sampled is None:
        return f", held {reported:.1f} GiB on a GPU (its allocator's peak)"
    return f", held {sampled:.1f} GiB on a GPU (nvidia-smi's samples" + (
        f"; its allocator's peak {reported:.1f} GiB)" if reported is not None else ")"
    )


def _read(path: ArtefactPath) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # a packed trial without the file raises FileNotFoundError too
        return None
