"""A torch process that hangs: one thread holds Dynamo's compile_lock forever, another makes the
first call of a compiled function and blocks on the lock (py-spy shows the blocked thread with
convert_frame's __call__ innermost). No heartbeat, no output after start-up.
"""

import os
import threading

import torch
from torch._dynamo import convert_frame


def hold_compile_lock(held: threading.Event, never: threading.Event) -> None:
    with convert_frame.compile_lock:
        held.set()
        never.wait()


def first_call() -> None:
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    compiled(torch.ones(2))


def main() -> None:
    torch.set_num_threads(1)
    held, never = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_compile_lock, args=(held, never), name="lock-holder-0", daemon=True)
    holder.start()
    held.wait(timeout=60)
    caller = threading.Thread(target=first_call, name="compiler-0", daemon=True)
    caller.start()
    print(f"pid={os.getpid()}", flush=True)
    caller.join()


if __name__ == "__main__":
    main()
