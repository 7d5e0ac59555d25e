"""Spawns a grandchild that ignores SIGTERM and outlives us; then exits 0 or hangs (argv[1]).

The runner must leave no process of the group alive in either case.
"""

import os
import subprocess
import sys
import time

GRANDCHILD = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
    child = subprocess.Popen([sys.executable, "-c", GRANDCHILD])
    print(f"pid={os.getpid()}", flush=True)
    print(f"grandchild={child.pid}", flush=True)
    if mode == "hang":
        time.sleep(600)


if __name__ == "__main__":
    main()
