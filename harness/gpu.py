"""Which processes hold GPU memory, from `nvidia-smi` (no torch, no NVML binding needed).

The runner uses this after a trial's process group is gone: every pid of the trial must stop
holding GPU memory, or the next trial on the device starts with less memory than the last one did
(a leaked context, a member stuck in the driver). `None` everywhere means "cannot tell": no
nvidia-smi on PATH (a CPU host), or it failed or timed out.

Limits: nvidia-smi reports pids in the driver's (host) pid namespace; inside a container without
the host pid namespace it lists nothing or other numbers, and the check then sees no trial pid
(True). A trial pid reused by an unrelated GPU process within `timeout_s` would read as held.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import time

QUERY = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 5.0
"""One nvidia-smi call; it normally answers in well under a second."""
POLL_S = 0.25


@functools.lru_cache(maxsize=1)
def nvidia_smi() -> str | None:
    """Path of nvidia-smi on PATH, looked up once per process (None on a CPU host)."""
    return shutil.which("nvidia-smi")


def available() -> bool:
    return nvidia_smi() is not None


def compute_pids() -> set[int] | None:
    """Pids of the compute processes that hold GPU memory now; None if nvidia-smi is missing,
    fails, times out or prints something unreadable."""
    exe = nvidia_smi()
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *QUERY], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return _parse(proc.stdout)


def _parse(text: str) -> set[int] | None:
    pids: set[int] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No running"):
            continue
        pid, _, memory = (part.strip() for part in line.partition(","))
        if not pid.isdigit():
            return None
        if memory == "0":               # listed but holding nothing ("[N/A]" counts as held)
            continue
        pids.add(int(pid))
    return pids


def wait_released(pids: set[int], timeout_s: float = 10.0) -> bool | None:
    """Poll until none of `pids` holds GPU memory: True once none does, False if some still do
    after `timeout_s`, None if nvidia-smi cannot tell (missing, or failing at the last poll)."""
    wanted = set(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        held = compute_pids()
        if held is None:
            return None
        if not wanted & held:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def total_memory_gib() -> list[float] | None:
    """Each GPU's memory in GiB, in nvidia-smi's order; None if it cannot tell."""
    exe = nvidia_smi()
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        sizes = [float(line) / 1024 for line in proc.stdout.split() if line.strip()]
    except ValueError:
        return None
    return sizes if proc.returncode == 0 and sizes else None


def held_by(pids: set[int]) -> set[int] | None:
    """Which of `pids` hold GPU memory now (None: cannot tell)."""
    held = compute_pids()
    return None if held is None else set(pids) & held
