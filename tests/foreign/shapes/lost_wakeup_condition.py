"""Lost wake-up: Condition.notify_all() before the consumer waits, and a wait without a predicate.

User program: an inference worker that waits for the model loader. A "loader" thread builds the
weights and calls `cond.notify_all()` under the condition's lock ("model ready"). The "server"
thread first compiles and warms up its request path with torch.compile (backend="eager"), then
does `with cond: cond.wait()` with no predicate and no timeout to wait for the model, and only
then serves. The main thread prints `waiting for model...` and joins both threads.
What should happen: a hang in the user's own code, no torch race. The loader needs a few
milliseconds; the server's warm-up compile takes most of a second, so the notification is sent
while nobody waits and is lost (a Condition keeps no memory of a notify); the server then waits
forever. The CPU goes idle with the main thread in join() and the server in Condition.wait().
Expected classification: HANG, no catalogued race (the generic `hang`).
"""

import sys
import threading

import torch

torch.set_num_threads(1)


def main():
    cond = threading.Condition()
    state = {}

    def loader():
        weights = torch.randn(64, 64)
        with cond:
            state["weights"] = weights
            cond.notify_all()  # "model ready"

    def server():
        def respond(x, w):
            return torch.softmax(x @ w, dim=-1)

        fast = torch.compile(respond, backend="eager")
        fast(torch.randn(4, 64), torch.randn(64, 64))  # warm-up compile first
        with cond:
            cond.wait()  # BUG: no predicate (state.get("weights")) and no timeout
        for _ in range(100):
            fast(torch.randn(4, 64), state["weights"])
        print("served 100 requests", flush=True)

    print("waiting for model...", flush=True)
    threads = [threading.Thread(target=server, name="server"), threading.Thread(target=loader, name="loader")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
