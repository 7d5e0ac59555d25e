"""Each CUDA device's context, made through the driver in a thread while Python imports torch.

A process's CUDA context took 0.35-0.38 s on an H100 host (results/h100-2026-12-05-startup), and
the trainer made it only after its imports, in dflash.cuda_start's thread. `DriverContexts` asks
the driver (libcuda, through ctypes, which lets go of the GIL in each call) for each device's
primary context before torch is imported; torch's runtime later takes the same context. It is a
warm-up and nothing more: where there is no driver or a call fails, it records why and torch
reports the real error when it gets there. With it, the trainer waited 0.0 s for its devices in two
cold runs on a fresh H100, against 0.0-0.4 s (results/h100-2026-12-06-fast-start/slow-host).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable

LIBRARY = "libcuda.so.1"
JOIN_S = 5.0
"""How long its joiner waits: the trainer is done with it by then, or it is stuck in the driver."""


def ordinals(devices: Iterable[str]) -> tuple[int, ...]:
    """The CUDA ordinals in device names ("cuda" is 0), each once; no others."""
    found = []
    for name in devices:
        kind, _, index = str(name).partition(":")
        if kind == "cuda" and (index == "" or index.isdigit()):
            found.append(int(index or 0))
    return tuple(sorted(set(found)))


class DriverContexts:
    """cuInit and each device's primary context, in the thread `cuda-context`."""

    def __init__(self, wanted: Iterable[int], *, remap: bool = False, library: str = LIBRARY) -> None:
        self.wanted, self.remap, self.library = tuple(wanted), remap, library
        self.made: tuple[int, ...] = ()
        self.failure = ""
        """Why it stopped early (no driver, a call's CUresult), else empty."""
        self._thread = threading.Thread(target=self._run, name="cuda-context", daemon=True)

    def start(self) -> DriverContexts:
        if self.wanted:
            self._thread.start()
        return self

    def join(self, timeout: float = JOIN_S) -> None:
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.made = self._retain(ctypes.CDLL(self.library))
        except (OSError, RuntimeError) as e:
            self.failure = str(e)

    def _retain(self, cuda: ctypes.CDLL) -> tuple[int, ...]:
        _check(cuda.cuInit(0), "cuInit")
        count = ctypes.c_int()
        _check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        indices = {i % count.value if self.remap and count.value else i for i in self.wanted}
        made = []
        for i in sorted(x for x in indices if x < count.value):
            device, context = ctypes.c_int(), ctypes.c_void_p()
            _check(cuda.cuDeviceGet(ctypes.byref(device), i), "cuDeviceGet")
            # Retained and never released: torch's runtime uses this same context until the exit.
            _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
            made.append(i)
        return tuple(made)


def _check(result: int, call: str) -> None:
    if result != 0:
        raise RuntimeError(f"{call} returned CUresult {result}")


def start(devices: Iterable[str], *, remap: bool = False) -> DriverContexts:
    """The contexts of the CUDA devices among `devices`, started; nothing to do where there are none."""
    return DriverContexts(ordinals(devices), remap=remap).start()
