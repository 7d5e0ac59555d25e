"""Two worker threads die of an uncaught exception; Python's default hook prints them and the
program exits 0, as most threaded programs do."""

import os
import threading


def work(n: int) -> None:
    raise RuntimeError(f"worker {n} lost its request")


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    threads = [threading.Thread(target=work, args=(n,), name=f"worker-{n}") for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    print("served", flush=True)


if __name__ == "__main__":
    main()
