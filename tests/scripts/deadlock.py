"""Two named threads take two locks in opposite order and deadlock; no heartbeat, no output."""

import faulthandler
import os
import signal
import sys
import threading

LOCK_A = threading.Lock()
LOCK_B = threading.Lock()
BOTH_HOLD = threading.Barrier(2)


def take_a_then_b() -> None:
    with LOCK_A:
        BOTH_HOLD.wait()
        with LOCK_B:
            pass


def take_b_then_a() -> None:
    with LOCK_B:
        BOTH_HOLD.wait()
        with LOCK_A:
            pass


def main() -> None:
    # The harness bootstrap registers this too; doing it here keeps the script usable alone.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    threads = [
        threading.Thread(target=take_a_then_b, name="locker-0"),
        threading.Thread(target=take_b_then_a, name="locker-1"),
    ]
    for t in threads:
        t.start()
    print(f"pid={os.getpid()}", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
