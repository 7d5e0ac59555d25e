"""The project speaks only of itself: a run is cited by its date, machine, torch version, command,
store or log file, never by the work that produced it (work sessions, numbered calls of a GPU
host, this project's own issue numbers). Every file outside results/ is read, tracked or untracked
(but not ignored); under results/, which holds data, only the file names are checked.
"""

from __future__ import annotations

import bisect
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()
"""This file names the patterns and feeds the checker bad lines on purpose: not scanned."""

# (name, pattern, why), matched case-insensitively. Identifiers such as `start_new_session` do not
# match the word patterns (\b does not split on `_`).
BANNED: tuple[tuple[str, str, str], ...] = (
    ("session", r"\bsessions?\b",
     "a work session ('the fourteenth session', 'this session'); POSIX sessions are allowed below"),
    ("device-time", r"\bdevice[ -]time\b", "the GPU-host budget of the work, not of a run"),
    ("device-tool", r"\bdevice[ -]tools?\b", "the machinery that ran the work"),
    ("device-call", r"\bdevice[ -]calls?\b", "a GPU-host run seen as a call of that machinery"),
    ("tool-call", r"\btool[ -]calls?\b", "a step of the work"),
    ("numbered-call", r"\bcalls?\s+#?\d", "'call 11', 'calls 45-47': cite run N and its log instead"),
    ("call-of-date", r"\bcalls?\s+of\s+\d{4}-\d\d-\d\d", "'the third call of 2026-12-01'"),
    ("h200-call", r"\bH200(?:'s)?\s+calls?\b", "'an H200 call': an H200 run"),
    ("call-file", r"\bcall(?:\d+|<N>|\$n|\{|\*)", "callNN folders and logs, call<N>-log.txt, call*: runNN"),
    ("old-script", r"h200_call|unpack_call|call_trials|call_script|\bcall\.(?:sh|tgz)\b",
     "the scripts' old names: h200_run.sh, unpack_run.sh, tools.run_trials, run.tgz"),
    ("call-log", r"\bcall's\s+(?:log|budget|files|window|time)\b", "'the call's log': the run's"),
    ("project-issue", r"\bissues?\s+#?\d{1,3}\b",
     "this project's issues ('issue 5'); upstream ones have five digits or more (#123177)"),
)

# Spans these match are not offences, whatever BANNED patterns they hold.
ALLOWED: tuple[tuple[str, str], ...] = (
    (r"\bown\s+(?:process\s+)?sessions?\b", "a POSIX session: 'its own session', 'their own sessions'"),
    (r"\bnew\s+(?:process\s+)?sessions?\b", "setsid / start_new_session: 'a new session'"),
    (r"\bsession\s+leaders?\b", "the POSIX session leader"),
    (r"\bprocess\s+sessions?\b", "'a process session'"),
    (r"\bcompile\s+session\b", "Dynamo's compile session (convert_frame's `_compile_session_context`)"),
)

_BANNED = [(name, re.compile(p, re.I)) for name, p, _ in BANNED]
_ALLOWED = [re.compile(p, re.I) for p, _ in ALLOWED]


def _matches(text: str) -> list[tuple[int, str, str]]:
    """(offset, pattern name, matched text) for each banned match not inside an allowed span."""
    allowed = [m.span() for a in _ALLOWED for m in a.finditer(text)]
    return sorted((m.start(), name, m.group(0)) for name, pattern in _BANNED for m in pattern.finditer(text)
                  if not any(lo <= m.start() and m.end() <= hi for lo, hi in allowed))


def offences(line: str) -> list[tuple[str, str]]:
    """(pattern name, matched text) in one line (or a file name)."""
    return [(name, found) for _, name, found in _matches(line)]


LEAD = re.compile(r"^\s*(?:(?:#+|//)\s*)?")
"""A line's indentation and comment marker, dropped when lines are joined."""


def text_offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, matched text) over a file's text. Its lines are read joined by
    spaces, so that a phrase a line break splits ('(call' / '31: ...', 'its own' / 'session') reads
    as one; a match is reported at the line it starts on."""
    starts, pieces, at = [], [], 0
    for line in text.splitlines():
        piece = LEAD.sub("", line).rstrip()
        starts.append(at)
        pieces.append(piece)
        at += len(piece) + 1
    return [(bisect.bisect_right(starts, offset), name, found) for offset, name, found in _matches(" ".join(pieces))]


def listed_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore, as paths from the root."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return sorted({p for p in out.decode("utf-8", "surrogateescape").split("\0") if p})


def test_the_checker_finds_bad_lines_and_passes_good_ones():
    bad = {
        "REPORT.md, tenth session: a cell clean at 29 stressed trials": "session",
        "## 2026-12-01 (seventeenth session): the matrix complete": "session",
        "what this session measured": "session",
        "~35 minutes of device time as the pool": "device-time",
        "scheduler plan) through the device tool on one H200": "device-tool",
        "a device call ships the whole checkout": "device-call",
        "the tool calls that ran it": "tool-call",
        "(call 11)": "numbered-call",
        "calls 45-47 stopped starting trials": "numbered-call",
        "Call 13's files unpacked first": "numbered-call",
        "the H200 campaign's third call of 2026-12-01": "call-of-date",
        "an H200 call overran its budget": "h200-call",
        "results/h200-2026-11-29/call07/all.log": "call-file",
        "results/h200-campaign/call14-log.txt": "call-file",
        "the raw logs under results/h200-2026-11-29/call*/all.log": "call-file",
        "bash tools/h200_call.sh 585 campaign": "old-script",
        "python -m tools.call_trials 45": "old-script",
        "only the call's time": "call-log",
        "the campaign matrix (issue 5)": "project-issue",
        "Issue 6's question": "project-issue",
        "as issue #2 asks": "project-issue",
    }
    for line, name in bad.items():
        assert name in [n for n, _ in offences(line)], (line, offences(line))
    good = [
        "starts each trial with start_new_session=True",
        "the workload in its own session, output to a file",
        "Trials run in their own sessions, so Ctrl-C does not reach them",
        "runs it in a new session (setsid); the child is the session leader",
        "one run of a workload in its own process session, with faulthandler",
        "the flag is process-global for a whole Dynamo compile session (r18)",
        "Issue #123177, PR #184357, pytorch/pytorch#126024",
        "H200 run 35 (results/h200-campaign/run35-log.txt), torch 2.11, 2026-12-01",
        "every compiled call inside guard.call(); a call that lands during a trace",
        'ap.add_argument("--calls", type=int, default=300)',
        '{"phase": "bench:x::none", "call": 34, "round": 0}',
        "Traceback (most recent call last):",
        "duplicate compiles|first calls ran eagerly",
    ]
    for line in good:
        assert offences(line) == [], (line, offences(line))
    # A phrase a line break splits is found at its first line; each line alone is found once.
    wrapped = "22 tests on the H200 (call\n    # 31: 21 passed), this\nsession\nin its own\nsession"
    assert text_offences(wrapped) == [(1, "numbered-call", "call 3"), (3, "session", "session")]


def test_no_file_name_carries_the_vocabulary():
    found = [f"{p}: {name} {text!r}" for p in listed_files() for name, text in offences(p)]
    assert not found, "file names with the banned vocabulary:\n" + "\n".join(found)


def test_no_file_outside_results_carries_the_vocabulary():
    found = []
    for p in listed_files():
        path = ROOT / p
        if p.startswith("results/") or path.resolve() == SELF or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue                        # binary (a plot, an archive)
        found += [f"{p}:{n}: {name} {text!r}" for n, name, text in text_offences(data.decode("utf-8", "replace"))]
    assert not found, f"{len(found)} uses of the banned vocabulary:\n" + "\n".join(found)

