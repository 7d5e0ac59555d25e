"""A worker thread dies of device-memory exhaustion, printed as torch prints it (no torch needed):
the runner must call it RESOURCE, not a race CRASH. `cublas` prints cuBLAS's allocation failure."""

import os
import sys
import threading
import traceback

MESSAGES = {
    "oom": (
        "torch.OutOfMemoryError",
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
        "capacity of 139.80 GiB of which 42.88 MiB is free.",
    ),
    "cublas": ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
}


def main() -> int:
    print(f"pid={os.getpid()}")
    kind = sys.argv[1] if len(sys.argv) > 1 else "oom"
    exc_type, message = MESSAGES[kind]
    printed: list[str] = []

    def worker() -> None:
        try:
            raise RuntimeError(message)
        except RuntimeError:
            text = (
                traceback.format_exc().replace("RuntimeError:", f"{exc_type}:", 1)
                if exc_type != "RuntimeError"
                else traceback.format_exc()
            )
            printed.append(text)

    t = threading.Thread(target=worker, name="dflash-train-0")
    t.start()
    t.join(timeout=30)
    print(f"Exception in thread {t.name}:", file=sys.stderr)
    print(printed[0], file=sys.stderr, end="")
    return 1


if __name__ == "__main__":
    sys.exit(main())
