"""A consumer waits on Queue.get for a sentinel that the producer, failing, never sends: a lost
wake-up in the program's own code. Prints a line first, so the output is not empty."""

import os
import queue
import threading

ITEMS: queue.Queue = queue.Queue()


def produce() -> None:
    try:
        ITEMS.put(1)
        raise OSError("source closed")
    except OSError:
        return  # the bug: the sentinel (None) is never put


def consume() -> None:
    while ITEMS.get() is not None:
        pass


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    threads = [threading.Thread(target=produce, name="producer-0"), threading.Thread(target=consume, name="consumer-0")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
