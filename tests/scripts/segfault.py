"""Reads address 0 through ctypes: SIGSEGV, with faulthandler's fatal-error report."""

import ctypes
import faulthandler
import os


def read_null() -> bytes:
    return ctypes.string_at(0)


def main() -> None:
    faulthandler.enable()
    print(f"pid={os.getpid()}", flush=True)
    read_null()


if __name__ == "__main__":
    main()
