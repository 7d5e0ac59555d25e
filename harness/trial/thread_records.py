"""The bootstrap's records of uncaught thread and Future exceptions (`thread_errors.jsonl`), and
whose each one is: the program's own, or a library's (noise).

The bootstrap decides the owner by the frames that created the thread or Future (an installed
package's code made it: a library's). A library's own pool failing its pending Futures as it closes
at exit (Inductor's compile workers: `SubprocPool closed`) is noise: kept with the trial, never
a failure, never part of the program's output.
"""

from __future__ import annotations

import json
from typing import Any

from harness.trial import folder


def read(out: Any) -> list[dict]:
    """Every record of a trial's folder (a Path, or a packed trial's zip path)."""
    raw = folder.text(out / folder.THREAD_ERRORS) or ""
    records = []
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def split_noise(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """The program's own records, and a library's (noise)."""
    own = [r for r in records if r.get("owner", "program") != "library"]
    return own, [r for r in records if r.get("owner", "program") == "library"]


def blocks(records: list[dict]) -> list[str]:
    """Records as printed tracebacks, each under its thread's header."""
    return [f"Exception in thread {r.get('thread')}:\n{r.get('traceback', '')}" for r in records]


def without_noise(text: str, noise: list[dict]) -> str:
    """The output less what Python's thread hook printed for a library's threads (the record's
    traceback is the text it printed, under `Exception in thread NAME:`)."""
    for block in blocks(noise):
        text = text.replace(block, "")
    return text


def program_view(out: Any) -> tuple[str, list[str]]:
    """What a reader of the run should see, from one read of its records: the output less the
    libraries' noise plus the program's records it does not hold (a Future's exception nobody read
    is recorded, not printed), and the program's records as printed tracebacks."""
    own, noise = split_noise(read(out))
    text = without_noise(folder.text(out / folder.OUTPUT) or "", noise)
    own_blocks = blocks(own)
    missing = [b for b in own_blocks if b not in text]
    return text + ("\n" + "\n".join(missing) if missing else ""), own_blocks


def main_death(records: list[dict]) -> dict | None:
    """The bootstrap's record of the main thread's uncaught exception (written as interpreter exit
    began, before it joined the non-daemon threads), if the main thread died of one."""
    return next((r for r in records if r.get("main")), None)


def exit_waits(record: dict) -> str:
    """What interpreter exit waited for after the main thread died: `non-daemon thread NAME
    (running FILE:LINE in FUNC)`, joined; "" when it waited for none."""
    waits = [w for w in record.get("exit_waits_for") or () if isinstance(w, dict)]
    parts = []
    for w in waits[:4]:
        at = _program_frame(w.get("at") or [])
        parts.append(f"non-daemon thread {w.get('thread')}" + (f" (running {at})" if at else ""))
    more = f" and {len(waits) - 4} more" if len(waits) > 4 else ""
    return ", ".join(parts) + more


def _program_frame(frames: list[str]) -> str:
    """The innermost frame outside the standard library's threading module, shortened to its file."""
    for frame in frames:
        if "threading.py:" not in frame:
            path, _, rest = frame.partition(":")
            return f"{path.rsplit('/', 1)[-1]}:{rest}"
    return frames[0] if frames else ""


def child_threads(records: list[dict]) -> dict[str, str]:
    """Threads whose deaths only a child process of the run recorded: name -> `pid N (ROLE)`."""
    root = {r.get("thread") for r in records if "pid" not in r}
    return {
        str(r.get("thread")): f"pid {r['pid']} ({r.get('process') or 'python'})"
        for r in records
        if "pid" in r and r.get("thread") not in root
    }
