"""A spawned worker dies of SIGSEGV while its parent, done with it, waits at exit for a non-daemon
thread that never ends: the first process never crashes, yet the run failed of the child's crash."""

import ctypes
import multiprocessing
import threading
import time


def worker():
    ctypes.string_at(0)  # a native crash in the child


def flusher():
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    threading.Thread(target=flusher, name="flusher").start()
    child = multiprocessing.get_context("spawn").Process(target=worker, name="worker-0")
    child.start()
    child.join()
    print(f"worker exit code {child.exitcode}", flush=True)
