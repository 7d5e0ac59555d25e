"""Rejects its input the way the trainer CLI does: one `error:` line, exit 2."""

import sys


def main() -> int:
    print("error: unknown preset 'nope'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
