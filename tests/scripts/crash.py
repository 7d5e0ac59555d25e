"""A named worker thread raises; main reports it in the trainer's format and exits 1.

The message carries an address and a random number so that signature normalisation is tested.
"""

import os
import random
import sys
import threading

from thread_report import report


def load_batch(table: dict) -> None:
    step = random.randint(1, 10_000)
    raise ValueError(f"batch {step} missing from table at {hex(id(table))}")


def worker(failures: list) -> None:
    try:
        load_batch({})
    except Exception as exc:
        failures.append((threading.current_thread().name, exc))


def main() -> int:
    print(f"pid={os.getpid()}")
    failures: list = []
    t = threading.Thread(target=worker, args=(failures,), name="worker-0")
    t.start()
    t.join(timeout=30)
    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
