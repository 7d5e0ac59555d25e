"""Whole-GPU busy fraction while a block runs, sampled from `nvidia-smi` (bench only).

`utilization.gpu` is the fraction of the sample period in which at least one kernel ran on the
device. On a GPU shared by target and drafter threads it is the device's busy fraction, not the
drafter's alone; with the target on other GPUs (devices.drafter_devices apart) it is the
drafter's. `None` when nvidia-smi is missing or printed nothing usable (CPU hosts).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

SAMPLE_MS = 200


class GpuBusy:
    """`with GpuBusy(index) as g: ...` then `g.fraction` (mean of the samples, 0..1, or None),
    or `g.fraction_between(t0, t1)` for a window of `time.monotonic()`.

    `index` None (a CPU device) samples nothing.
    """

    def __init__(self, index: int | None) -> None:
        self.index = index
        self.samples: list[float] = []
        self.times: list[float] = []
        """`time.monotonic()` when each sample was read (within one period of when it was taken)."""
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuBusy:
        exe = shutil.which("nvidia-smi")
        if exe is None or self.index is None:
            return self
        self._proc = subprocess.Popen(
            [
                exe,
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                "-i",
                str(self.index),
                "-lms",
                str(SAMPLE_MS),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name="dflash-gpu-busy", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.strip()
            if line.isdigit():
                self.times.append(time.monotonic())
                self.samples.append(int(line) / 100.0)

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5.0)

    @property
    def fraction(self) -> float | None:
        return _mean(self.samples)

    def fraction_between(self, t0: float, t1: float) -> float | None:
        """Mean of the samples read in [t0, t1]: the busy fraction of a steady window without
        the compiles before it (a 60-step launch-bound bench spent most of its 76 s compiling
        and read 1% over the whole run, docs/log/2026-11-30-gpu-busy-steady-state.md)."""
        return _mean([v for t, v in zip(self.times, self.samples) if t0 <= t <= t1])


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None
