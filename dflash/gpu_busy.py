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

SAMPLE_MS = 200


class GpuBusy:
    """`with GpuBusy(index) as g: ...` then `g.fraction` (mean of the samples, 0..1, or None).

    `index` None (a CPU device) samples nothing.
    """

    def __init__(self, index: int | None) -> None:
        self.index = index
        self.samples: list[float] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuBusy:
        exe = shutil.which("nvidia-smi")
        if exe is None or self.index is None:
            return self
        self._proc = subprocess.Popen(
            [exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
             "-i", str(self.index), "-lms", str(SAMPLE_MS)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, name="dflash-gpu-busy", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.strip()
            if line.isdigit():
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
        return round(sum(self.samples) / len(self.samples), 4) if self.samples else None
