"""Two worker threads die; the program's own threading.excepthook only counts them (a service's
hook that logs to a file) and prints nothing; its main thread's exception goes to its own
sys.excepthook, which prints nothing either. Exit 1 only from the main thread's death."""

import sys
import threading

deaths = []


def quiet_hook(args):
    deaths.append(args.thread.name)


def quiet_sys_hook(exc_type, exc, tb):
    pass


threading.excepthook = quiet_hook
sys.excepthook = quiet_sys_hook


def work(i):
    raise RuntimeError(f"worker {i} failed")


threads = [threading.Thread(target=work, args=(i,), name=f"worker-{i}") for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert deaths == ["worker-0", "worker-1"] or sorted(deaths) == ["worker-0", "worker-1"], deaths
if "--main-dies" in sys.argv:
    raise KeyError("main gave up")
