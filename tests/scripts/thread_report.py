"""How the test programs report their threads' failures: the trainer's format (one
`=== thread NAME failed: Type: message ===` line, then the traceback, on stderr) and exit 1."""

import sys
import traceback


def report(failures: list) -> int:
    """`failures`: (thread name, exception) pairs; the exit code: 1 if any, else 0."""
    for name, exc in failures:
        print(f"=== thread {name} failed: {type(exc).__name__}: {exc} ===", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
    return 1 if failures else 0
