"""The failures of a plain log: a program's output, a traceback, a bug report's error lines, a
faulthandler or py-spy dump (text or `--json`)."""

from __future__ import annotations

import json
import re

from harness.diagnosis.failure import Failure
from harness.trial import blocking, hangs, native, signature, tracebacks
from harness.trial.interpreter import installed_torch


def from_text(text: str, *, source: str, rc: int | None = None, torch: str | None = None) -> Failure | None:
    """A plain log's first failure (`failures_in_text` gives them all)."""
    found = failures_in_text(text, source=source, rc=rc, torch=torch)
    return found[0] if found else None


def failures_in_text(text: str, *, source: str, rc: int | None = None, torch: str | None = None) -> list[Failure]:
    """Every failure of a plain log: each distinct traceback (threads that printed at once, several
    races in one run), a native crash, a wrong result, a bare error line (a bug report's "Error
    logs", pytest's `E   ...` lines), or an all-thread dump of a hung process (py-spy's text or
    JSON, faulthandler's, or the harness's own `hang_dump.txt`); [] when nothing in it failed.
    GitHub issue text is read as is: code fences do not hide a traceback."""
    torch = torch or torch_in(text) or installed_torch()
    threads = _pyspy_json_threads(text)
    if threads:
        return [_hang(threads, text, source, torch)]
    native_text = _native_part(text)
    of = dict(source=source, text=text, native=native_text, torch=torch, run=source)
    found = [_of_signature(f.signature, count=f.count, **of) for f in signature.run_failures(text)]
    if found:
        return found
    sig = _one_signature(text, rc)
    if sig is not None:
        return [_of_signature(sig, **of)]
    threads = hangs.parse_dump_text(text) or hangs.parse_rendered(text)
    return [_hang(threads, text, source, torch)] if threads else []


def _pyspy_json_threads(text: str) -> tuple:
    """The threads of a `py-spy dump --json` text; () for any other text."""
    if not (text.lstrip().startswith("[") and '"thread_name"' in text[:4000]):
        return ()
    try:
        return hangs.parse_pyspy_json(json.loads(text))
    except ValueError:
        return ()


def _one_signature(text: str, rc: int | None) -> signature.Signature | None:
    """A log with no traceback: its native crash, its wrong result, or its bare error line."""
    sig = signature.crash_signature(text, rc=rc)
    if sig is None and re.search(r"^WRONG_RESULT:", text, re.M):
        sig = signature.wrong_result_signature(text, rc=rc)
    if sig is None and (bare := tracebacks.bare_exception(text)) is not None:
        sig = signature.exception_signature(bare)
    return sig


def _of_signature(sig: signature.Signature, **of) -> Failure:
    return Failure(outcome=_outcome_of(sig), key=sig.key, summary=sig.summary, **of)


def _outcome_of(sig: signature.Signature) -> str:
    return "ABORT" if sig.kind in ("fatal", "signal") else "WRONG_RESULT" if sig.kind == "wrong_result" else "CRASH"


_TORCH_LINE = re.compile(
    r'^torch (\d+\.\d+\.\d+\S*?),? |"torch": "(\d+\.\d+\.\d+[^"]*)"|'
    r"^PyTorch version: (\d+\.\d+\.\d+\S*)|^(?:\[pip3?\] )?torch[=]=(\d+\.\d+\.\d+\S*)|"
    r"^torch\s*(?:version)?\s*[:=]\s*(\d+\.\d+\.\d+\S*)",
    re.M | re.I,
)


def torch_in(text: str) -> str | None:
    """The torch a log names (a trainer's stall dump header `torch X, Python Y`, its JSON events'
    `"torch": "X"`, collect_env's `PyTorch version: X` and `[pip3] torch==X`, a report's
    `torch: X`): a log read on another machine is judged on the torch it ran on."""
    m = _TORCH_LINE.search(text)
    return next((g for g in m.groups() if g), None) if m else None


def _hang(threads, text: str, source: str, torch: str | None) -> Failure:
    sig = signature.hang_signature(threads)
    kind = blocking.classify(threads, one_dump=True)
    return Failure(
        source=source,
        outcome="HANG",
        key=sig.key,
        summary=sig.summary,
        text=text,
        torch=torch,
        run=source,
        detail=f"dump; {kind.text()}" if kind else "",
    )


def _native_part(text: str) -> str:
    frames = native.native_stack(text)
    return native.render(frames) if frames else ""
