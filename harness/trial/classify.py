"""A run's verdict from what it left: its output, the threads' records, how it ended.

DESIGN.md "Outcome rules", in order of precedence: a run alive at its deadline (hung, slow, or its
main thread dead with its exit held), a workload that reported its own stall or hang, then the
exit (a signal or faulthandler's report, the workload's contract codes, non-zero, or exit 0 with
threads that died). A failure whose innermost frame is the harness's code is the harness's defect.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from harness.trial import blocking, folder, hangs, progress, signature, thread_records, tracebacks
from harness.trial.ending import HANG_CONFIRM_S, Ending
from harness.trial.frames import top_frames
from harness.trial.outcome import HARNESS_DEFECT, Outcome, TrialResult, mark_resource

_FATAL_SIGNALS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Floating point exception": "SIGFPE",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
}


def _noise_entries(noise: list[dict]) -> list[dict] | None:
    keep = ("thread", "type", "message", "created_at")
    return [{k: (r.get(k)[:3] if k == "created_at" else r.get(k)) for k in keep if r.get(k)} for r in noise] or None


def _threads_started(out: Path | None) -> int | None:
    """Threads and processes the program started (a child's threads run apart from the first's)."""
    data = folder.read_json(out / folder.THREADS) if out is not None else None
    if not isinstance(data, dict):
        return None
    counts = [data.get("started"), data.get("processes", 0)]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    return sum(counts)


def classify(
    result: TrialResult,
    ending: Ending,
    text: str,
    out: Path | None = None,
    records: list[dict] | None = None,
    *,
    foreign: bool = False,
) -> None:
    """DESIGN.md "Outcome rules", in order of precedence. `foreign`: a user's command, whose exit
    codes mean zero, non-zero or a signal and nothing more (the trainer's and repros' 2 and 3
    are their contract's)."""
    hooked, noise = thread_records.split_noise(records or [])
    text = thread_records.without_noise(text, noise)
    result.thread_errors = len(hooked) or None
    result.noise = _noise_entries(noise)
    result.threads_started = _threads_started(out)
    # A workload that failed may still say what it held (dflash's `failed` event: its GPU memory).
    result.final = _final_json(text) or _final_json(text, event="failed")
    if result.final is not None:
        # Steady state when the workload reports it (dflash: second half of the steps), so a short
        # trial's throughput is not mostly its compile time; else the whole-run rate.
        for key in ("tokens_per_s_steady", "tokens_per_s"):
            if isinstance(result.final.get(key), (int, float)):
                result.tokens_per_s = float(result.final[key])
                break
    if ending.how in ("hang", "timeout"):
        _classify_stuck(result, ending, text, hooked)
    elif _stalled(result, out) or (not foreign and _reported_hang(result, text)):
        pass  # a HANG the workload reported itself
    else:
        _classify_exit(result, text, hooked, foreign=foreign)
        mark_resource(result)
    # _classify_exit_0 has read them already for a run that exited 0.
    if result.failures is None and (result.outcome is not Outcome.OK or hooked):
        result.failures = [
            f.to_json() for f in signature.run_failures(text, extra=thread_records.blocks(hooked))
        ] or None
    _harness_defect(result, text, hooked)
    if ending.survivors:
        result.outcome = Outcome.HARNESS_ERROR
        result.detail = f"processes {list(ending.survivors)} survived SIGKILL; {result.detail}"


def _classify_stuck(result: TrialResult, ending: Ending, text: str, hooked: list[dict]) -> None:
    """A run alive at its deadline, idle (hang) or busy (timeout): the main thread's death that
    left its exit waiting, else a started process's native crash, else the hang or the slow run."""
    main_death = thread_records.main_death(hooked)
    if main_death is not None:
        _classify_main_death(result, main_death, hooked)
        return
    if ending.how == "hang":
        _classify_hang(result, ending)
    else:
        _set(result, Outcome.TIMEOUT, None, _busy_detail(ending))
    _child_native_crash(result, text)


def _classify_main_death(result: TrialResult, death: dict, hooked: list[dict]) -> None:
    """The main thread died of an exception, then interpreter exit waited for a non-daemon thread
    past the deadline: the run failed of that exception (never slow, never the program's own hang),
    and the detail names what held the exit."""
    found = signature.run_failures("", extra=thread_records.blocks(hooked))
    main = next((f for f in found if death.get("thread") in f.threads), found[0] if found else None)
    waits = thread_records.exit_waits(death)
    detail = f"the main thread died of {death.get('type')}: {str(death.get('message'))[:120]}"
    if waits:
        detail += f"; then waited at exit for {waits}"
    _set(result, Outcome.CRASH, main.signature if main else None, detail)


_FATAL_LINE = re.compile(r"Fatal Python error: (.+?)[ \t]*$", re.M)
"""faulthandler's first line of a native crash report, its kind (`Segmentation fault`) in group 1."""


def _child_native_crash(result: TrialResult, text: str) -> None:
    """A run that hung or ran out its time, whose output holds a native crash report: the first
    process was alive to the end, so a process it started crashed (a spawned worker's segfault,
    its parent then waiting on a thread that never ends). The crash is the run's failure; what
    came after it stays in the detail."""
    fatal = _FATAL_LINE.search(text)
    if fatal is None:
        return
    then = f"{result.outcome.value}: {result.detail}" if result.detail else result.outcome.value
    result.signal = _FATAL_SIGNALS.get(fatal.group(1))
    sig = signature.crash_signature(text, rc=None)
    _set(result, Outcome.ABORT, sig, f"a process the program started: {fatal.group(0)}; then {then}")


def _classify_hang(result: TrialResult, ending: Ending) -> None:
    threads = ending.dump.threads if ending.dump else ()
    kind = blocking.classify(threads)
    result.hang_kind = kind.kind if kind else None
    _set(
        result,
        Outcome.HANG,
        signature.hang_signature(threads),
        f"no progress for {ending.elapsed_s - ending.last_progress_s:.1f} s (idle, silent, the same "
        f"stacks {HANG_CONFIRM_S:g} s apart); dump by {ending.dump.method if ending.dump else 'none'}"
        + (f"; {kind.text()}" if kind else ""),
    )


HARNESS_CODE = re.compile(r"[/\\]harness[/\\](?:runtime|faults|inject\.py|trial[/\\]bootstrap)")
"""A frame of the harness's code that runs inside the program: the fixes, the scheduler, the probes."""


def _harness_defect(result: TrialResult, text: str, hooked: list[dict]) -> None:
    """A failure whose innermost frame is the harness's own code (a fix's wrapper, the scheduler)
    is the harness's defect, not the program's: HARNESS_ERROR, with where it raised."""
    if result.outcome not in (Outcome.CRASH, Outcome.ABORT):
        return
    found = tracebacks.parse_tracebacks(text + "\n" + "\n".join(thread_records.blocks(hooked)))
    for tb in found:
        innermost = tb.frames[0] if tb.frames else None  # innermost first
        # The plan's own `raise` rule raises there on purpose: the fault it injects is no defect.
        # A finaliser's traceback (`Exception ignored in`) failed nothing: a fix's context closed in
        # another thread when torch's stash freed what it did not own, then the segfault (stash-refcount).
        if tb.short_type == "InjectedFault" or tb.unraisable or tb.handled:
            continue
        if innermost is not None and HARNESS_CODE.search(innermost.filename):
            where = f"{innermost.filename}:{innermost.line} in {innermost.name}"
            _set(result, Outcome.HARNESS_ERROR, None, f"{HARNESS_DEFECT} {tb.exc_type}: {tb.message[:200]} at {where}")
            return


def _busy_detail(ending: Ending) -> str:
    """Why a trial past its deadline is slow, not hung: how busy its tree was and where."""
    parts = [f"still working at the deadline ({ending.elapsed_s:.1f} s)"]
    if ending.cores is not None:
        parts.append(f"{ending.cores:.2f} cores busy over the last {progress.WINDOW_S:g} s")
    if ending.busiest:
        parts.append(f"busiest: {ending.busiest}")
    active = [t for t in (ending.dump.threads if ending.dump else ()) if t.status.startswith("active")]
    where = [f"{t.name} in {frames[0]}" for t in active if (frames := top_frames(t.frames, limit=1))]
    if where:
        parts.append("running: " + ", ".join(where[:3]))
    if ending.resolved:
        parts.append(f"{ending.resolved} idle spell(s) that moved on")
    return "; ".join(parts)


def _stalled(result: TrialResult, out: Path | None) -> bool:
    """A workload that ended itself for want of progress (dflash's watchdog: a `failed` event with
    `stalled`, exit 4) hung as surely as one the harness had to kill: HANG, keyed by the threads
    of the dump it wrote, which is kept with the trial."""
    stalled = (result.final or {}).get("stalled") if isinstance(result.final, dict) else None
    if not isinstance(stalled, dict):
        return False
    threads: tuple = ()
    dump = stalled.get("dump")
    if isinstance(dump, str) and Path(dump).is_file():
        text = Path(dump).read_text(encoding="utf-8", errors="replace")
        if out is not None:
            (out / folder.STALL_DUMP).write_text(text)
        threads = hangs.parse_dump_text(text)
    _set(
        result,
        Outcome.HANG,
        signature.hang_signature(threads),
        f"the workload stalled: no step for {stalled.get('waited_s', '?')} s; dump by {stalled.get('dump_method', 'none')}",
    )
    return True


_HANG_LINE = re.compile(r"^HANG:.*$", re.M)


def _reported_hang(result: TrialResult, text: str) -> bool:
    """A workload that gave up on its own threads' deadline (repro/README.md's contract: `HANG:`,
    all stacks by faulthandler, exit 1) hung: HANG, keyed by the threads of that dump. Before this,
    such a trial was a CRASH keyed by its last line (2.15.0's first r25 trial 0, retired)."""
    if not result.rc or result.rc < 0:
        return False
    line = _HANG_LINE.search(text)
    if line is None:
        return False
    threads = hangs.parse_dump_text(text[line.end() :])
    _set(
        result,
        Outcome.HANG,
        signature.hang_signature(threads),
        f"the workload reported a hang: {line.group(0)[len('HANG:') :].strip()}; dump by faulthandler",
    )
    return True


def _classify_exit(result: TrialResult, text: str, hooked: list[dict] = (), *, foreign: bool = False) -> None:
    rc = result.rc
    fatal = _FATAL_LINE.search(text)
    if rc == 2 and not foreign:
        line = next((ln for ln in text.splitlines() if ln.startswith("error:")), "no error: line")
        _set(result, Outcome.HARNESS_ERROR, None, f"workload rejected its input: {line}")
    elif (rc is not None and rc < 0) or fatal:
        result.signal = _signal_name(-rc) if rc is not None and rc < 0 else None
        if result.signal is None and fatal:
            result.signal = _FATAL_SIGNALS.get(fatal.group(1))
        sig = signature.crash_signature(text, rc=rc)
        _set(result, Outcome.ABORT, sig, fatal.group(0) if fatal else f"killed by {result.signal}")
    elif not foreign and (rc == 3 or re.search(r"^WRONG_RESULT:", text, re.M)):
        sig = signature.wrong_result_signature(text, rc=rc)
        _set(result, Outcome.WRONG_RESULT, sig, f"WRONG_RESULT: {sig.message}")
    elif rc != 0:
        sig = hooked_version(signature.crash_signature(text, rc=rc), hooked)
        _set(result, Outcome.CRASH, sig, f"exit {rc}")
    else:
        _classify_exit_0(result, text, hooked)


def hooked_version(sig: signature.Signature | None, hooked: list[dict]) -> signature.Signature | None:
    """A thread's exception as the hook recorded it, where the output printed the same exception:
    threads that fail at once print their tracebacks interleaved, and the frames read from the
    output then differ from run to run (one program's runs split into two groups under load)."""
    if not hooked or sig is None or sig.kind not in ("known", "exception", "cuda"):
        return sig
    clean = [f.signature for f in signature.run_failures("", extra=thread_records.blocks(hooked))]
    # The same key first (a known message keys without frames), else the same exception type.
    return next((c for c in clean if c.key == sig.key), None) or next(
        (c for c in clean if c.exc_type == sig.exc_type), sig
    )


def _classify_exit_0(result: TrialResult, text: str, hooked: list[dict]) -> None:
    """Exit 0 is not success when a thread died: Python's default hook prints an uncaught thread
    exception and the program goes on to exit 0. Uncaught (the hook's records, or `Exception in
    thread` blocks when the program replaced the hook) or printed at error level, each is a
    failure; a finaliser's (`Exception ignored in`) or a warning's traceback is not."""
    printed = [
        tb
        for tb in tracebacks.parse_tracebacks(text)
        if not tb.unraisable and not tb.handled and tb.short_type not in ("SystemExit", "KeyboardInterrupt")
    ]
    if hooked or printed:
        found = signature.run_failures(text, extra=thread_records.blocks(hooked))
        result.failures = [f.to_json() for f in found] or None
        sig = found[0].signature if found else signature.crash_signature(text, rc=1)
        threads = sorted({str(h.get("thread")) for h in hooked})
        what = (
            (
                f"{len(hooked)} uncaught exception(s) in thread(s) {', '.join(threads[:4])}"
                + (f" and {len(threads) - 4} more" if len(threads) > 4 else "")
            )
            if hooked
            else f"{len(printed)} exception(s) printed"
        )
        _set(result, Outcome.CRASH, sig, f"exit 0, but {what}")
        return
    skip = re.search(r"^SKIP: ?(.*)$", text, re.M)
    result.skipped = skip is not None
    _set(result, Outcome.OK, None, f"skipped: {skip.group(1)}" if skip else "exit 0")


def _signal_name(signum: int) -> str | None:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def _set(result: TrialResult, outcome: Outcome, sig: signature.Signature | None, detail: str) -> None:
    result.outcome = outcome
    result.detail = detail
    if sig is not None:
        result.signature = sig.key
        result.signature_summary = sig.summary
        result.signature_version = sig.version
        result.exc_type = sig.exc_type or None


def _final_json(text: str, event: str = "final") -> dict | None:
    """The last `{"event": EVENT, ...}` line, if the workload printed one."""
    for line in reversed(text.splitlines()):
        if line.startswith("{") and f'"{event}"' in line:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("event") == event:
                return data
    return None
