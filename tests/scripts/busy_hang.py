"""A named thread spins in Python forever: the process is busy but makes no progress."""

import os
import threading


def spin() -> None:
    n = 0
    while True:
        n = (n + 1) % 1_000_003


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    t = threading.Thread(target=spin, name="spinner-0", daemon=True)
    t.start()
    t.join()


if __name__ == "__main__":
    main()
