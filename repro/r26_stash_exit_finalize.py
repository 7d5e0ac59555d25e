"""r26_stash_exit_finalize: the process aborts at exit after its threads were joined.

Symptom: SIGABRT as the interpreter exits, after every thread was joined and the program's last
  line ran: `terminate called without an active exception`, or `Fatal Python error:
  _PyThreadState_DeleteCurrent: the function must be called with the GIL held, but the GIL is
  released` with `Python runtime state: finalizing`.
Mechanism: a thread that touched CUDAGraph Trees' thread-local state (`get_obj`, as a
  reduce-overhead call and the cstash-tls-init fix do) holds Python objects in torch's C++ TLS
  stash (`torch._C._stash_obj_in_tls`). join() returns when the thread's Python state is gone;
  its C++ thread_local destructors run after that and take the GIL to drop the objects. If the
  main thread has begun finalizing by then, CPython ends the destructor's thread with
  pthread_exit, whose forced unwinding through a noexcept destructor calls std::terminate.
Trigger: --rounds times, a child forked from this process (torch and cudagraph_trees already
  imported, no thread running) starts --threads threads that each read cudagraph_trees'
  thread-local containers and return; the child joins them and exits normally. A round fails
  when its child dies by a signal. --release-s S widens the window: the first thread's stashed dict
  also holds an object whose finaliser gives the GIL up every millisecond for S s (a teardown doing I/O or
  device syncs).
Affected versions: measured by the harness (catalogue row r26); Python 3.14 blocks such a
  thread instead of ending it (CPython gh-87135), so the abort needs Python <= 3.13.
Fix: await-thread-exit (harness.runtime.fixes: an atexit hook waits until the threads have left the OS).
Upstream: #38228 and #117762 (a thread taking the GIL during finalization aborts the process),
  PR #89169 (the C stash), CPython gh-87135 / PR #105805.
"""

import argparse
import faulthandler
import os
import signal
import sys
import tempfile
import time
from collections import Counter

from _common import beat, run_threads, setup

CHILD_TIMEOUT_S = 60.0


class SlowRelease:
    """Released by the thread's C++ TLS destructor; its teardown gives the GIL up every
    millisecond for `seconds` (as a teardown doing I/O or device syncs would), so the exiting
    main thread runs in between and the first retake after finalization has begun meets it."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __del__(self):
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            time.sleep(0.001)


def child(cgt, fs, args, out_fd):
    """One round: threads that stash through cudagraph_trees and return; then a normal exit."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    # faulthandler's handler, entered by several aborting threads during finalization, faults
    # again (SIGSEGV, SIGBUS seen) and buries the abort's own message under its reports.
    faulthandler.disable()

    def exiter(i):
        fs.thread_start("exiter")
        containers = cgt.get_obj(cgt.local, "tree_manager_containers")
        if args.release_s > 0 and i == 0:
            # One slow teardown: several threads ending in the abort at once crash the process
            # with SIGSEGV and no message instead (seen with 8).
            containers["r26-release"] = SlowRelease(args.release_s)

    bodies = {f"repro-exiter-{i}": (lambda i=i: exiter(i)) for i in range(args.threads)}
    errors = run_threads(bodies, deadline_s=30)
    sys.stdout.flush()
    # Not os._exit: the interpreter's own finalization is the other side of the race.
    sys.exit(1 if errors else 0)


def wait_child(pid):
    """(exit status or -signal, or None on a hang: the child is then killed)."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60, help="child processes, one after another")
    p.add_argument("--threads", type=int, default=8, help="stashing threads per child")
    p.add_argument(
        "--release-s",
        type=float,
        default=0.0,
        help="seconds the stashed object's finaliser keeps giving the GIL up (widens the window)",
    )
    args, fs = setup(p)
    if args.rounds < 1 or args.threads < 1 or args.release_s < 0:
        print("error: --rounds and --threads must be >= 1, --release-s >= 0", file=sys.stderr)
        return 2
    import torch  # noqa: F401
    import torch._inductor.cudagraph_trees as cgt  # its module body stashes for this thread only

    signals, hangs, other, first_output = [], 0, 0, ""
    for r in range(args.rounds):
        sys.stdout.flush()
        sys.stderr.flush()
        with tempfile.TemporaryFile() as out:
            pid = os.fork()
            if pid == 0:
                child(cgt, fs, args, out.fileno())
            status = wait_child(pid)
            out.seek(0)
            output = out.read().decode(errors="replace")
        if status is None:
            hangs += 1
        elif status < 0:
            signals.append((r, status))
        elif status:
            other += 1
        if status != 0 and not first_output:
            first_output = output
        beat()
    if first_output:
        # The first failed child's own output; the others' would only repeat it.
        print(first_output, file=sys.stderr, end="" if first_output.endswith("\n") else "\n", flush=True)
    counts = f"{len(signals)}/{args.rounds} rounds died by a signal, {hangs} hung, {other} exited non-zero"
    if signals:
        # One thread ended inside its destructor aborts (terminate, or CPython's fatal error);
        # several at once, or an unwind through pybind11's GIL guard, can segfault silently.
        by_signal = Counter(signal.Signals(-status).name for _, status in signals)
        faces = ", ".join(f"{name} {n}" for name, n in sorted(by_signal.items()))
        print(f"{counts} ({faces}); first: round {signals[0][0]}")
        print("REPRODUCED: a child died by a signal at interpreter exit after its threads were joined")
        return 1
    if hangs or other:
        print(f"OTHER FAILURE: {counts}")
        return 1
    print(f"NOT REPRODUCED ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
