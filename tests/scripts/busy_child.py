"""Silent for a long time while a child process burns CPU: slow, not hung (a compile worker, a build)."""

import os
import subprocess
import sys
import threading


def wait_for_child() -> None:
    subprocess.run([sys.executable, "-c", "while True: pass"], check=False)


def main() -> None:
    print(f"pid={os.getpid()}", flush=True)
    t = threading.Thread(target=wait_for_child, name="builder-0")
    t.start()
    t.join()


if __name__ == "__main__":
    main()
