"""Calls os.abort() from a helper: SIGABRT, with faulthandler's fatal-error report."""

import faulthandler
import os


def give_up() -> None:
    os.abort()


def main() -> None:
    faulthandler.enable()
    print(f"pid={os.getpid()}", flush=True)
    give_up()


if __name__ == "__main__":
    main()
