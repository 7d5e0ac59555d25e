"""Daemon threads still inside torch when the main thread returns: the process aborts at exit.

User program: a training script with "fire and forget" background helpers. Two daemon
"metrics" threads loop forever computing running statistics of the weights with a
torch.compile'd function (backend="aot_eager") and plain tensor ops; the main thread trains a
small MLP for a fixed number of steps, prints the final loss and returns from main() without
stopping or joining the daemons ("daemon threads die with the process").
What should happen: no catalogued race; an exit-time abort in most runs. At interpreter
finalization CPython ends every daemon thread the next time it tries to take the GIL, with
pthread_exit (Python/ceval_gil.h take_gil -> PyThread_exit_thread). A daemon that is inside a
torch op which released the GIL (pybind11::gil_scoped_release) is unwound from C++ frames that
cannot be unwound (a noexcept path in libtorch_python), so libstdc++ prints `terminate called
without an active exception` and the process dies of SIGABRT (rc 134) after printing its final
line. gdb showed the aborting daemon in `THPVariable_matmul` (another run of a sibling program:
`THPVariable_mean` -> `~gil_scoped_release`) -> `PyEval_RestoreThread` -> `take_gil` ->
`pthread_exit` -> `_Unwind_ForcedUnwind` -> `std::terminate` (torch 2.13 CPU, Python 3.11).
The message is the one races.toml files under stash-exit-finalize (r26), whose mechanism is a
joined thread's C stash dropped at finalization; here it is the CPython daemon-thread exit
(cpython gh-87135 family), a bug of the program (daemons left inside torch at exit), not a
torch.compile race. Seen directly: SIGABRT in 12 of 15 runs, SIGSEGV once, exit 0 twice; under
`harness stress` (its bootstrap and probes change the timing) 2 of 6 runs aborted, which the
harness named stash-exit-finalize by the message (native crash site THPVariable_is_conj, the
stack through pthread_exit and _Unwind_ForcedUnwind, no ThreadLocalPythonObjects frame).
Expected classification: ABORT at exit in most direct runs, OK otherwise; no catalogued race.
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def weight_stats(w):
        return torch.stack([w.mean(), w.std(), w.abs().max()])

    stats = torch.compile(weight_stats, backend="aot_eager")
    stats(model[0].weight.detach())
    latest = {}

    def metrics(i):
        big = torch.randn(256, 256)
        while True:  # a daemon: "it dies with the process"
            latest[i] = stats(model[0].weight.detach())
            (big @ big).mean()

    for i in range(2):
        threading.Thread(target=metrics, args=(i,), name=f"metrics-{i}", daemon=True).start()

    print("training...", flush=True)
    for _ in range(300):
        x, y = torch.randn(32, 64), torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
