"""A pool's task fails and nobody reads its Future: nothing is printed and the program exits 0. A
second failing task's exception is read and handled: that one is the program's business."""

import os
from concurrent.futures import ThreadPoolExecutor


def work(n: int) -> None:
    raise ValueError(f"request {n} was dropped")


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pool") as pool:
        forgotten = pool.submit(work, 1)  # never read
        handled = pool.submit(work, 2)
        try:
            handled.result(timeout=10)
        except ValueError:
            print("request 2 failed and was retried", flush=True)
    del forgotten
    print("served", flush=True)


if __name__ == "__main__":
    main()
