"""A thread waits ~20 s on a silent, CPU-busy child process; the parent is idle but not hung.

User program: a training launcher that runs a data-preparation step as a separate Python
process (subprocess.run of `python -c <CPU-bound loop>`, ~20 s, prints nothing) from a
"data-prep" thread while the main thread waits for it with join() (no timeout), then compiles
and runs a short training loop (backend="eager") and prints the result.
What should happen: no failure, no race. For ~20 s the parent process sits idle (main thread in
join(), data-prep thread in subprocess.run's wait()) and prints nothing, but its child process
keeps a CPU busy the whole time; then the program prints two lines and exits 0. A watchdog that
looks only at the parent's CPU use or at output would call it a hang; one that counts the
process tree must not.
Expected classification: OK (not HANG with hang = 15 s idle, finishes well inside 60 s).
"""

import subprocess
import sys
import threading

import torch

torch.set_num_threads(1)

PREP = """
import time
end = time.monotonic() + 20.0
acc = 0
while time.monotonic() < end:
    for i in range(10000):
        acc = (acc * 31 + i) % 1000003
"""


def main():
    prep_rc = {}

    def data_prep():
        prep_rc["rc"] = subprocess.run([sys.executable, "-c", PREP], check=False).returncode

    t = threading.Thread(target=data_prep, name="data-prep")
    t.start()
    t.join()
    if prep_rc.get("rc") != 0:
        print(f"data prep failed: rc={prep_rc.get('rc')}", file=sys.stderr)
        return 1
    w = torch.zeros(8, requires_grad=True)

    def loss_fn(x, y):
        return ((x @ w - y) ** 2).mean()

    loss_c = torch.compile(loss_fn, backend="eager")
    opt = torch.optim.SGD([w], lr=0.1)
    x, y = torch.randn(64, 8), torch.randn(64)
    for _ in range(50):
        opt.zero_grad()
        loss = loss_c(x, y)
        loss.backward()
        opt.step()
    print("data prep done", flush=True)
    print(f"trained: loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
