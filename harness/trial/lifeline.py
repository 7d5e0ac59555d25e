"""Trials die with the process that runs them, even one killed with SIGKILL.

The runner starts each trial with setsid (so that a hang can be dumped and its whole group
killed), and a setsid'd process does not die with its parent: after `kill -9` of a `harness matrix`, a
trainer trial ran on as an orphan (parent pid 1) until it finished by itself, and on a GPU it
would have held memory while the resumed matrix started.

A parent-death signal (prctl PR_SET_PDEATHSIG) would not do: it reaches only the direct child,
not the compile workers and other grandchildren of the trial's group, and it fires when the
parent *thread* that forked ends, not the process (the pool's worker threads start the trials).
So each process that runs trials starts one reaper (`token()`, lazily, once): a small process in
its own setsid group that holds the read end of a pipe whose write end only the runner's process
holds. The pipe reads EOF when that process is gone, however it died; the reaper then kills
every process whose environment carries the runner's token (`ENV`, which `runner.child_env` puts
in every trial's environment and every descendant inherits, also one that left the trial's
process group with setsid) and the process group of each, scanning /proc until none is left.
A Ray worker that runs trials (harness.campaign.ray_backend) has its own reaper the same way, so
its trials die when Ray kills it with its job or loses its node.

The reaper runs this file as a script with `python -I -S` (nothing but the stdlib, no site): it
costs one interpreter start per runner process, and nothing per trial.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time

ENV = "HARNESS_LIFELINE"
"""Every trial's environment carries `ENV=<token>`: the reaper finds the trial's processes by it."""
SETTLE_S = 1.0
"""After the runner's death, keep scanning until nothing carries the token for this long: a
trial the runner was forking as it died execs with the token a moment later."""
GIVE_UP_S = 30.0
"""Stop scanning after this long even if processes carrying the token remain (they do not die)."""
SCAN_S = 0.1

_lock = threading.Lock()
_reaper: tuple[int, str, subprocess.Popen] | None = None
"""(owner pid, token, reaper process): a forked child of the runner starts its own."""


def token() -> str:
    """The token this process's trials carry in `ENV`; starts the reaper on first use."""
    global _reaper
    with _lock:
        if _reaper is None or _reaper[0] != os.getpid() or _reaper[2].poll() is not None:
            tok = f"{os.getpid()}-{secrets.token_hex(8)}"
            # stdin is the lifeline: its write end stays here (not inheritable, PEP 446); setsid
            # keeps a terminal's Ctrl-C or a kill of our process group from reaching it.
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, tok],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            _reaper = (os.getpid(), tok, proc)
        return _reaper[1]


def carriers(tok: str) -> list[int]:
    """Pids of live processes whose environment holds `ENV=tok` (Linux /proc; [] elsewhere)."""
    marker = f"{ENV}={tok}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if marker in environ.split(b"\0"):
            found.append(int(name))
    return found


def reap(tok: str, *, settle_s: float = SETTLE_S, give_up_s: float = GIVE_UP_S) -> int:
    """SIGKILL every process carrying `tok` and its process group, until none has for `settle_s`;
    returns how many processes were found."""
    mine = os.getpgid(0)
    killed: set[int] = set()
    start = quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < settle_s and time.monotonic() - start < give_up_s:
        pids = carriers(tok)
        if pids:
            quiet_since = time.monotonic()
        for pid in pids:
            killed.add(pid)
            try:
                pgid = os.getpgid(pid)
                if pgid != mine:
                    os.killpg(pgid, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(SCAN_S)
    return len(killed)


def reaper_pid() -> int | None:
    """This process's reaper, which `pool.kill_child_groups` must spare (it leads its own group)."""
    with _lock:
        return _reaper[2].pid if _reaper is not None and _reaper[0] == os.getpid() else None


def _main(tok: str) -> None:
    # A terminal's Ctrl-C or hang-up is for the runner, which kills its own trials then; the
    # reaper waits for the runner's end either way.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    reap(tok)


if __name__ == "__main__":
    _main(sys.argv[1])
