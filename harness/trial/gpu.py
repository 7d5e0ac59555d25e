"""Which processes hold GPU memory, and how much, from `nvidia-smi` (no torch, no NVML binding).

The runner uses this after a trial's process group is gone: every pid of the trial must stop
holding GPU memory, or the next trial on the device starts with less memory than the last one did
(a leaked context, a member stuck in the driver). While a trial runs it samples what the trial's
processes hold (`MemorySampler`): a figure of GPU memory for native crashes and hangs too, which
the workload's own report (dflash's `final`/`failed` events) cannot give.
`None` everywhere means "cannot tell": no nvidia-smi on PATH (a CPU host), or it failed or timed out.

Limits: nvidia-smi reports pids in the driver's (host) pid namespace; inside a container without
the host pid namespace it lists nothing or other numbers, and the check then sees no trial pid
(True). A trial pid reused by an unrelated GPU process within `timeout_s` would read as held.
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Callable

QUERY = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
MEMORY_QUERY = ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 5.0
"""One nvidia-smi call; it normally answers in well under a second."""
POLL_S = 0.25


@functools.lru_cache(maxsize=1)
def nvidia_smi() -> str | None:
    """Path of nvidia-smi on PATH, looked up once per process (None on a CPU host)."""
    return shutil.which("nvidia-smi")


def available() -> bool:
    return nvidia_smi() is not None


def _query(args: tuple[str, ...]) -> str | None:
    """nvidia-smi's output for `args`; None if it is missing, fails or times out."""
    exe = nvidia_smi()
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SMI_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def compute_pids() -> set[int] | None:
    """Pids of the compute processes that hold GPU memory now; None if nvidia-smi is missing,
    fails, times out or prints something unreadable."""
    text = _query(QUERY)
    return None if text is None else _parse(text)


def _rows(text: str) -> list[list[str]] | None:
    """A compute-apps query's lines as their comma-separated fields, the pid first; None when a
    line does not start with one (nvidia-smi printed something else)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No running"):
            continue
        fields = [part.strip() for part in line.split(",")]
        if not fields[0].isdigit():
            return None
        rows.append(fields)
    return rows


def _parse(text: str) -> set[int] | None:
    rows = _rows(text)
    if rows is None:
        return None
    # Listed with 0 MiB holds nothing ("[N/A]" counts as held).
    return {int(fields[0]) for fields in rows if fields[1:] != ["0"]}


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
    text = _query(("--query-gpu=memory.total", "--format=csv,noheader,nounits"))
    if text is None:
        return None
    try:
        sizes = [float(line) / 1024 for line in text.split() if line.strip()]
    except ValueError:
        return None
    return sizes or None


@functools.lru_cache(maxsize=64)
def names(visible: str | None) -> str | None:
    """The GPUs a process with CUDA_VISIBLE_DEVICES=`visible` (None: unset, every GPU) sees, by
    nvidia-smi's names: `NVIDIA H200`, `8x NVIDIA H200`, or the names joined by `, `; None when it
    sees none or nvidia-smi cannot tell. Asked once per value: a record says where it ran (a Ray
    cluster's nodes may differ), not what the GPU did."""
    text = _query(("--query-gpu=index,uuid,name", "--format=csv,noheader"))
    if text is None:
        return None
    gpus = [[f.strip() for f in line.split(",", 2)] for line in text.splitlines() if line.count(",") >= 2]
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        # Ids (index or UUID, a prefix of one allowed) in the order given; CUDA stops at the first bad one.
        chosen = []
        for v in wanted:
            match = [g for g in gpus if g[0] == v or (v.startswith("GPU-") and g[1].startswith(v))]
            if not match:
                break
            chosen.append(match[0])
        gpus = chosen
    seen = [g[2] for g in gpus]
    if not seen:
        return None
    return f"{len(seen)}x {seen[0]}" if len(seen) > 1 and len(set(seen)) == 1 else ", ".join(seen)


def held_by(pids: set[int]) -> set[int] | None:
    """Which of `pids` hold GPU memory now (None: cannot tell)."""
    held = compute_pids()
    return None if held is None else set(pids) & held


def memory_of(pids: set[int]) -> dict[str, float] | None:
    """MiB that `pids` hold together on each GPU now, by GPU uuid ({} when none of them holds
    any); None if nvidia-smi cannot tell. A process whose memory reads `[N/A]` adds nothing."""
    text = _query(MEMORY_QUERY)
    rows = None if text is None else _rows(text)
    if rows is None or any(len(fields) != 3 for fields in rows):
        return None
    held: dict[str, float] = {}
    for pid, uuid, mib in rows:
        if int(pid) in pids:
            try:
                held[uuid] = held.get(uuid, 0.0) + float(mib)
            except ValueError:
                continue
    return held


class MemorySampler:
    """The most GPU memory a trial's live processes held together on any one GPU, sampled by a
    named daemon thread every `period_s` (`start`, `stop`) and on demand (`sample_now`).

    A thread of its own because nvidia-smi can block (a wedged GPU is when trials hang, and
    `subprocess.run` waits without limit for a timed-out child it killed): the runner's hang and
    deadline checks must never wait on it. `pids` is called at each sample and should return the
    group's live members only: a pid seen earlier in the trial may by now belong to another
    trial's GPU process. After the first query nvidia-smi cannot answer it stops asking.
    The figure is a lower bound on the true peak (a spike between samples is missed; the caching
    allocator keeps what it reserved, so a trial's footprint mostly only grows) and includes what
    `torch.cuda.max_memory_reserved` leaves out: the CUDA context, cuBLAS workspaces, a second
    process of the trial."""

    def __init__(self, pids: Callable[[], set[int]], period_s: float, *, name: str = "harness-gpu-memory") -> None:
        self.peak_mib: dict[str, float] = {}
        self.error: str | None = None
        """Why sampling stopped early on an exception (a harness bug): the runner notes it in the
        trial's `detail`, so a figure from fewer samples is never taken for a whole one."""
        self._lock = threading.Lock()  # stop() may read while a late sample still writes
        self._pids = pids
        self._period_s = period_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._sampled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._period_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                now = memory_of(self._pids())
            except Exception as e:  # not only threading's excepthook on stderr: the record
                self.error = f"{type(e).__name__}: {e}"
                self._sampled.set()
                return
            if now is not None:
                with self._lock:
                    for uuid, mib in now.items():
                        self.peak_mib[uuid] = max(mib, self.peak_mib.get(uuid, 0.0))
            self._sampled.set()  # after the update: sample_now's caller reads it next
            if now is None:
                return

    def sample_now(self, timeout_s: float = SMI_TIMEOUT_S) -> None:
        """Wake the thread for a sample and wait up to `timeout_s` for one to finish (a hung trial,
        before the kill frees what it holds). A sample already under way may be the one waited
        for; the wake stays set, so another follows, and `stop` joins it."""
        if not self._thread.is_alive():
            return
        self._sampled.clear()
        self._wake.set()
        self._sampled.wait(timeout_s)

    def stop(self, timeout_s: float = SMI_TIMEOUT_S) -> float | None:
        """Stop sampling (join with a deadline: a stuck nvidia-smi keeps only its daemon thread);
        the highest per-GPU figure in GiB, rounded up to 0.01, or None when no sample saw the
        processes hold memory."""
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        with self._lock:
            top = max(self.peak_mib.values(), default=0.0)
        return math.ceil(top / 1024 * 100) / 100 if top > 0 else None
