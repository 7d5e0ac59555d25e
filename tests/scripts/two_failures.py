"""One run, two different failures: a worker's KeyError and a loader's ValueError (exit 0)."""

import threading


def worker() -> None:
    {}["missing"]


def loader() -> None:
    raise ValueError("bad shard")


def main() -> None:
    for target, name in ((worker, "worker-0"), (loader, "loader-0")):
        t = threading.Thread(target=target, name=name)
        t.start()
        t.join(timeout=10)


if __name__ == "__main__":
    main()
