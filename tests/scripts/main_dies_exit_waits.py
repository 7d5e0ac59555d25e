"""The main thread dies of an exception while a non-daemon thread loops on: interpreter exit
waits for that thread forever (`--busy`: it spins; else it sleeps)."""

import sys
import threading
import time


def debug_server():
    while True:
        if "--busy" in sys.argv:
            sum(range(10_000))
        else:
            time.sleep(0.05)


threading.Thread(target=debug_server, name="debug-server").start()
time.sleep(0.2)
raise NameError("module is not installed as a submodule")
