"""Run one trial in a subprocess and turn whatever happens into a TrialResult.

Subprocess discipline after CPython libregrtest (`run_workers.py`, `worker.py`): argv list, never a
shell; `start_new_session=True` so the child leads its own process group; stdout and stderr into
one file (bpo-45410: one fd keeps messages in order); no pipes, so a grandchild holding the output
open cannot block us (bpo-38207). Hang detection: progress is a change of the heartbeat file or
growth of the output file; none for `hang_s` -> dump the stacks (hangs.py), then SIGKILL the group.

Whatever the ending, no process of the group survives: the group is killed while the child is
still an unreaped zombie (os.waitid WNOWAIT), so its pid -- which is the group id -- cannot be
reused by an unrelated process before the kill; then we wait until `killpg(pgid, 0)` reports the
group empty (orphaned grandchildren are reaped by pid 1, about 1 s later on this machine). Nor
does any survive the runner's own death, SIGKILL included: every trial carries the token of the
runner process's reaper (harness.trial.lifeline), which kills them when that process is gone.

On a GPU host (nvidia-smi on PATH; looked up once per process, so a CPU host pays nothing) the
runner also notes every group member it sees (the child's pid, a /proc scan every
MEMBERS_POLL_S and one just before the kill), and once the group is gone waits up to
GPU_RELEASE_TIMEOUT_S for none of those pids to hold GPU memory: `TrialResult.gpu_released`.
A leak is reported (False, plus a note in `detail`); it does not change the outcome. A sampler
thread asks nvidia-smi every GPU_MEM_POLL_S, and once before a hung or timed-out group is killed,
what the group's live pids hold: `TrialResult.gpu_mem_gib`, the highest sum on one GPU; a sampler
that stopped on an exception says so in `detail` (its figure is then from fewer samples).
"""

from __future__ import annotations

import datetime
import os
import platform
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.faults import exposure
from harness.inject import ENV_FIXES
from harness.trial import (
    folder,
    gpu,
    hangs,
    kernel_cache,
    lifeline,
    native,
    progress,
    thread_records,
)
from harness.trial.cells import split_cell
from harness.trial.classify import classify
from harness.trial.ending import HANG_CONFIRM_S, Ending
from harness.trial.folder import TRIAL_DIR_ENV
from harness.trial.interpreter import installed_torch, interpreter_versions
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.spec import REPO_ROOT, InvalidSpec, TrialSpec, argv_for

POLL_S = 0.1
GROUP_GONE_TIMEOUT_S = 15.0
"""Wait this long after SIGKILL for every process of the group to be gone and reaped."""
REAP_TIMEOUT_S = 10.0
OUTPUT_READ_CAP = 32 * 1024 * 1024
"""Classify from at most this many bytes of output (head and tail halves when larger)."""
MEMBERS_POLL_S = 0.5
"""GPU hosts only: how often the group's members are noted while the trial runs."""
GPU_MEM_POLL_S = 2.0
"""GPU hosts only: how often the group's GPU memory is sampled (one nvidia-smi call, 23 ms on
the H200; twelve trials at once make six calls a second). A trial that ends sooner has no figure."""
GPU_RELEASE_TIMEOUT_S = 10.0
"""GPU hosts only: how long the trial's pids may keep GPU memory after the group is gone
(the driver frees a dead process's memory asynchronously)."""
assert POLL_S < 1.0 <= GROUP_GONE_TIMEOUT_S

DEADLINE_IDLE_S = 10.0
"""At the deadline, a tree idle for this long (or hang_s, or half its run, if shorter) is checked
for a hang instead of being called busy."""
EXPOSURE_OFF = ("0", "off", "false", "no")
"""HARNESS_EXPOSURE in the harness's own environment with one of these turns the probes off for
every trial it runs (a spec turns them off for its own with `exposure: false`)."""
BOOTSTRAP_DIR = REPO_ROOT / "harness" / "trial" / "bootstrap"

Judge = Callable[[TrialResult, Path], None]
"""Reads a run that has ended (its result and folder) and may amend its verdict before the record
is written, once (stress: an OK run whose output shows a race failed); layers above the trial's
hold the readings (the catalogue)."""
AfterExit = Callable[[TrialResult], None]
"""Called once the process group is gone, before run_trial returns (e.g. on a CUDA host: wait
until the GPU memory the trial held is free again, so the next trial starts clean)."""


def run_trial(
    spec: TrialSpec,
    artefacts_dir: str | os.PathLike[str],
    *,
    judge: Judge | None = None,
    after_exit: AfterExit | None = None,
    replay_of: str | None = None,
) -> TrialResult:
    """Run `spec` once; every ending (including a bad spec) becomes a TrialResult, written once."""
    out = Path(artefacts_dir)
    out.mkdir(parents=True, exist_ok=True)
    folder.clear(out)
    result = _new_result(spec, out, replay_of)
    argv = _checked_argv(spec, result)
    if argv is None:
        return _finish(result, out, after_exit)
    result.plan_seed = spec.plan_seed
    folder.write_json(out / folder.SPEC, spec.to_json())
    for name, text in spec.files.items():
        (out / name).write_text(text, encoding="utf-8")
    env = child_env(spec, out)
    result.gpu = gpu.names(env.get("CUDA_VISIBLE_DEVICES")) if gpu.available() else None
    started = time.time()
    proc = _start(argv, spec, env, out / folder.OUTPUT, result)
    if proc is None:
        return _finish(result, out, after_exit)
    ending = _supervise(proc, spec, out)
    # The group is gone: a compile it was linking when killed left a truncated kernel that every
    # later process would load (catalogue row inductor-cache).
    removed = kernel_cache.remove_unfinished(kernel_cache.cache_dir(env), started - 1.0)
    _judge(result, proc, ending, spec, out, removed)
    if judge is not None:
        judge(result, out)
    return _finish(result, out, after_exit)


def _new_result(spec: TrialSpec, out: Path, replay_of: str | None) -> TrialResult:
    """A harness error until the run says otherwise, with what ran as fields (no reader parses
    the cell's name for it)."""
    result = TrialResult(
        trial_id=str(spec.trial_id),
        cell=str(spec.cell),
        trial_index=spec.trial_index,
        outcome=Outcome.HARNESS_ERROR,
        artefacts=str(out),
        host=socket.gethostname(),
        replay_of=replay_of,
        started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    result.workload, result.strategy, result.plan = split_cell(str(spec.cell))
    result.fixes = list(spec.fixes or ())
    return result


def _checked_argv(spec: TrialSpec, result: TrialResult) -> list[str] | None:
    """The child's command line once the spec is valid, with the versions it runs on; None (and
    the result's detail) for an invalid spec."""
    try:
        spec.validate()
        argv = argv_for(spec)
        result.torch_version, result.python = interpreter_versions(spec.python)
    except InvalidSpec as exc:
        result.torch_version, result.python = installed_torch(), platform.python_version()
        result.detail = f"invalid spec: {exc}"
        return None
    return argv


def _start(
    argv: list[str], spec: TrialSpec, env: dict[str, str], output_path: Path, result: TrialResult
) -> subprocess.Popen | None:
    """The child in a session of its own, its output into `output_path`; None (and the result's
    detail) when it cannot start."""
    with open(output_path, "wb") as fh:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd or REPO_ROOT,
                start_new_session=True,
            )
        except OSError as exc:
            result.detail = f"cannot start {argv[0]!r}: {exc}"
            return None


def _judge(
    result: TrialResult, proc: subprocess.Popen, ending: Ending, spec: TrialSpec, out: Path, removed: list[Path]
) -> None:
    """The run's outcome and what it leaves to read, from its ending, output and artefacts."""
    result.rc = proc.returncode
    result.duration_s = round(ending.elapsed_s, 3)
    text = _read_output(out / folder.OUTPUT)
    classify(result, ending, text, out, thread_records.read(out), foreign=spec.foreign)
    if removed:
        note = (
            f"removed {len(removed)} unfinished kernel(s) from Inductor's cache: {', '.join(p.name for p in removed)}"
        )
        result.detail = "; ".join(filter(None, (result.detail, note)))
    _keep_native_stack(out, text)
    _read_exposure(result, out)
    if ending.members is not None:
        result.gpu_mem_gib = ending.gpu_mem_gib
        if ending.gpu_mem_error:
            result.detail = f"{result.detail}; GPU memory sampler stopped early: {ending.gpu_mem_error}"
        _check_gpu_released(result, ending.members)
    if result.outcome.is_failure:
        end = ending.last_progress_s if result.outcome is Outcome.HANG else ending.elapsed_s
        result.time_to_failure_s = round(end, 3)


def child_env(spec: TrialSpec, out: Path) -> dict[str, str]:
    """The child's environment: ours + spec.env + the harness variables (which win). Paths are
    absolute: the program may start processes of its own in other folders."""
    out = Path(out).resolve()
    env = dict(os.environ)
    env.update(spec.env)
    tail = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), str(REPO_ROOT), tail) if p)
    env[TRIAL_DIR_ENV] = str(out)  # where the spec's files are, wherever the trial runs (a Ray node)
    env["HARNESS_HEARTBEAT"] = str(out / folder.HEARTBEAT)
    env["HARNESS_PLAN_LOG"] = str(out / folder.PLAN_LOG)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    env["HARNESS_THREAD_ERRORS"] = str(out / folder.THREAD_ERRORS)
    env["HARNESS_THREADS"] = str(out / folder.THREADS)
    env["HARNESS_CONFIG_SETS"] = str(out / folder.CONFIG_SETS)
    env[lifeline.ENV] = lifeline.token()  # the trial dies with us, even after our SIGKILL
    env = native.with_preload(env)  # a native crash also prints its C/C++ frames (harness.trial.native)
    env.pop("HARNESS_PLAN", None)
    env.pop("HARNESS_ROOT_PID", None)  # the trial's first process is its root, not ours
    env.pop(ENV_FIXES, None)  # ours to set (a harness run inside a run must not pass its own on)
    if spec.workload.kind == "command" and spec.fixes is not None:
        # The trainer and repros take their fixes as arguments; a command gets them in the bootstrap,
        # `none` alone installing the guard with no fix.
        env[ENV_FIXES] = ",".join(spec.fixes) or "none"
    if exposure_on(spec):
        env[exposure.ENV_EXPOSURE] = str(out / folder.EXPOSURE)
    else:
        env.pop(exposure.ENV_EXPOSURE, None)
    if spec.plan is not None:
        plan_path = out / folder.PLAN
        folder.write_json(plan_path, spec.plan)
        env["HARNESS_PLAN"] = str(plan_path)
    return env


def exposure_on(spec: TrialSpec) -> bool:
    """Whether the trial counts its windows: on unless its spec or our environment says off."""
    return spec.exposure and os.environ.get(exposure.ENV_EXPOSURE, "").strip().lower() not in EXPOSURE_OFF


def _read_exposure(result: TrialResult, out: Path) -> None:
    """The child's window counts; a trial with exposure on that wrote none (it died before a
    window opened and before exit, or never started Python) measured nothing: left None. Nor does
    one whose program started processes: the probes count the first process's windows only, and a
    child's failure may reach the output as a logged line, with no sign of the process it came from."""
    reading = exposure.read(out / folder.EXPOSURE)
    started = folder.read_json(out / folder.THREADS)
    if reading is None or (isinstance(started, dict) and started.get("processes")):
        return
    result.exposures = reading.counts
    result.exposure_first_s = reading.first_s
    result.exposure_eager = reading.eager or None


def _supervise(proc: subprocess.Popen, spec: TrialSpec, out: Path) -> Ending:
    """Watch until exit, hang or deadline; always leaves the group dead and the child reaped."""
    members = {proc.pid} if gpu.available() else None
    # Live members only at each sample: a pid seen earlier may belong to another trial by now.
    sampler = (
        gpu.MemorySampler(
            lambda: set(live_members(proc.pid)), GPU_MEM_POLL_S, name=f"harness-gpu-memory-{proc.pid}"
        ).start()
        if members is not None
        else None
    )
    gpu_mem_gib = gpu_mem_error = None
    try:
        ending = _watch(proc, spec, out, members)
        if ending.how != "exited":
            if sampler is not None:  # what a hung trial holds, before the kill frees it
                sampler.sample_now()
            if ending.dump is None:
                ending.dump = hangs.dump(proc.pid, out, output_path=str(out / folder.OUTPUT))
            if _has_exited(proc):  # it ended on its own while we were deciding: an exit
                ending.how = "exited"
    finally:
        # Also on KeyboardInterrupt or a harness bug: never leave the child running.
        if sampler is not None:  # before the reap: until then the group id cannot be reused
            gpu_mem_gib = sampler.stop()
            gpu_mem_error = sampler.error
        if members is not None:
            members.update(live_members(proc.pid))
        _kill_group(proc.pid)
        _reap(proc)
        survivors = _wait_group_gone(proc.pid)
    ending.survivors = tuple(survivors)
    ending.gpu_mem_gib, ending.gpu_mem_error = gpu_mem_gib, gpu_mem_error
    if members is not None:
        ending.members = frozenset(members | set(survivors))
    return ending


@dataclass(slots=True)
class _Watched:
    """What _watch knows of a running trial between polls (monotonic times)."""

    start: float
    clock: progress.TreeClock
    last_progress: float
    next_sample: float
    last_seen: tuple | None = None
    resolved: int = 0

    def look(self, out: Path, now: float) -> None:
        """Progress is new output, a heartbeat, or the tree's CPU (sampled every progress.SAMPLE_S)."""
        seen = _progress_marker(out)
        if seen != self.last_seen:
            self.last_seen, self.last_progress = seen, now
        if now >= self.next_sample:
            if self.clock.sample(now):
                self.last_progress = now
            self.next_sample = now + progress.SAMPLE_S

    def ending(self, how: str, now: float) -> Ending:
        return Ending(
            how=how, elapsed_s=now - self.start, last_progress_s=self.last_progress - self.start, resolved=self.resolved
        )


def _watch(proc: subprocess.Popen, spec: TrialSpec, out: Path, members: set[int] | None = None) -> Ending:
    """Until exit, a confirmed hang or the deadline. Progress is output, a heartbeat, or the
    tree's CPU (trial.progress); `members`, when given, collects the group's live pids every
    MEMBERS_POLL_S."""
    start = time.monotonic()
    watched = _Watched(start=start, clock=progress.TreeClock(pgid=proc.pid), last_progress=start, next_sample=start)
    next_members = start
    while True:
        now = time.monotonic()
        if members is not None and now >= next_members:
            members.update(live_members(proc.pid))
            next_members = now + MEMBERS_POLL_S
        if _has_exited(proc):
            return watched.ending("exited", now)
        watched.look(out, now)
        at_deadline = now - start >= spec.timeout_s
        if now - watched.last_progress >= spec.hang_s or at_deadline:
            ending = _idle_ending(proc, spec, out, watched, now, at_deadline)
            if ending is not None:
                return ending
            continue
        time.sleep(POLL_S)


def _idle_ending(
    proc: subprocess.Popen, spec: TrialSpec, out: Path, watched: _Watched, now: float, at_deadline: bool
) -> Ending | None:
    """The ending of a trial idle for hang_s or at its deadline: a hang when a second look finds it
    still idle; None when that look saw it move before the deadline (slow, not hung: keep watching)."""
    ending = watched.ending("timeout", now)
    if now - watched.last_progress >= min(spec.hang_s, DEADLINE_IDLE_S, (now - watched.start) / 2):
        ending.dump, hung = _second_look(proc, out, watched.clock)
        if hung:
            ending.how = "hang"
        elif not at_deadline:
            watched.resolved += 1
            watched.last_progress, watched.last_seen = time.monotonic(), _progress_marker(out)
            return None
    ending.cores, ending.busiest = watched.clock.recent_fraction(), watched.clock.busiest()
    ending.elapsed_s = time.monotonic() - watched.start
    return ending


def _second_look(proc: subprocess.Popen, out: Path, clock: progress.TreeClock) -> tuple[hangs.HangDump, bool]:
    """Dump the idle tree, wait HANG_CONFIRM_S, look again: hung when it stayed idle and silent
    and (with py-spy) every thread stood at the same frames. The first dump is kept either way."""
    first = hangs.dump(proc.pid, out, output_path=str(out / folder.OUTPUT))
    marker = _progress_marker(out)  # the faulthandler fallback writes into the output
    clock.sample(time.monotonic())
    time.sleep(HANG_CONFIRM_S)
    busy = clock.sample(time.monotonic())
    if _has_exited(proc) or busy or _progress_marker(out) != marker:
        return first, False
    if first.method.startswith("py-spy"):
        again = hangs.snapshot(proc.pid, hangs.find_pyspy())
        if again is not None:
            return first, hangs.same_stacks(first.threads, again)
    return first, True


def _progress_marker(out: Path) -> tuple:
    """Changes whenever the heartbeat file is rewritten (tmp + rename: new inode) or the
    output grows."""
    try:
        hb = os.stat(out / folder.HEARTBEAT)
        beat = (hb.st_ino, hb.st_mtime_ns, hb.st_size)
    except FileNotFoundError:
        beat = None
    return beat, os.stat(out / folder.OUTPUT).st_size


def _has_exited(proc: subprocess.Popen) -> bool:
    """True once the child has exited, WITHOUT reaping it (WNOWAIT): until we reap it, its pid
    and so its process-group id cannot be reused, which makes the later killpg safe."""
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped (should not happen; be safe)
        return True
    return info is not None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the whole group already exited: nothing to kill (libregrtest does the same)


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # uninterruptible sleep; reported by _wait_group_gone


def _wait_group_gone(pgid: int) -> list[int]:
    """Wait until no process of the group exists; return live survivors (zombies waiting for
    pid 1 to reap them do not count: they hold no resources)."""
    deadline = time.monotonic() + GROUP_GONE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        _kill_group(pgid)  # a member forked after the first kill
        time.sleep(POLL_S)
    return live_members(pgid)


def live_members(pgid: int) -> list[int]:
    """Non-zombie processes of a group, from /proc (Linux); [] elsewhere."""
    return [pid for pid, p in progress.group_processes(pgid).items() if p.state != "Z"]


# ------------------------------------------------------------------------------ classification


def _check_gpu_released(result: TrialResult, members: frozenset[int]) -> None:
    """Wait for the trial's pids to stop holding GPU memory; a leak is noted, not hidden."""
    result.gpu_released = gpu.wait_released(set(members), timeout_s=GPU_RELEASE_TIMEOUT_S)
    if result.gpu_released is False:
        held = gpu.held_by(set(members))
        pids = sorted(held) if held else sorted(members)
        result.detail = (
            f"{result.detail}; GPU memory still held by pids {pids} {GPU_RELEASE_TIMEOUT_S:g} s after the trial"
        )


def _read_output(path: Path) -> str:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= OUTPUT_READ_CAP:
            data = fh.read()
        else:
            half = OUTPUT_READ_CAP // 2
            head = fh.read(half)
            fh.seek(size - half)
            data = head + b"\n[... output cut by the harness ...]\n" + fh.read()
    return data.decode("utf-8", errors="replace")


def _keep_native_stack(out: Path, text: str) -> None:
    """A trial that died of a signal printed its native frames (harness.trial.native); name them now,
    on the machine whose libraries they point into (a store read elsewhere cannot)."""
    frames = native.native_stack(text)
    if frames:
        resolved = native.resolve(frames)
        (out / folder.NATIVE_STACK).write_text(
            f"# {socket.gethostname()}: {len(resolved)} frames, innermost first\n"
            + native.render(resolved, width=None)
            + "\n"
        )


def _finish(result: TrialResult, out: Path, after_exit: AfterExit | None) -> TrialResult:
    folder.write_json(out / folder.RESULT, result.to_json())
    if after_exit is not None:
        after_exit(result)
    return result
