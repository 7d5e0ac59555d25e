"""Makes steady heartbeat progress (and no output) for far longer than any test deadline."""

import os
import time


def beat(counter: int) -> None:
    path = os.environ["HARNESS_HEARTBEAT"]
    with open(path + ".tmp", "w") as fh:
        fh.write(f"{counter} {time.time()}\n")
    os.replace(path + ".tmp", path)


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    for counter in range(600):
        beat(counter)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
