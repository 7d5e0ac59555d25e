"""Finishes but reports a wrong answer: prints WRONG_RESULT: and exits 1."""

import os
import random
import sys


def main() -> int:
    print(f"pid={os.getpid()}")
    print(f"WRONG_RESULT: loss is nan at step {random.randint(1, 100)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
