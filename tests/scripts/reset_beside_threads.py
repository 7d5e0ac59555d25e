"""torch._dynamo.reset() called in a thread while other threads live, and once from the main thread
before any started: the bootstrap records only the first (`--child`: in a spawned process)."""

import multiprocessing
import sys
import threading
import time

import torch._dynamo


def run():
    torch._dynamo.reset()  # alone: no thread to race
    stop = threading.Event()
    idle = threading.Thread(target=stop.wait, name="idle")
    idle.start()
    resetter = threading.Thread(target=torch._dynamo.reset, name="resetter")
    resetter.start()
    resetter.join()
    stop.set()
    idle.join()


if __name__ == "__main__":
    if "--child" in sys.argv:
        child = multiprocessing.get_context("spawn").Process(target=run, name="worker-0")
        child.start()
        child.join()
    else:
        run()
    time.sleep(0.1)
