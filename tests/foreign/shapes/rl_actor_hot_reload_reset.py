"""RL actors call a compiled policy while a hot-reload thread swaps weights and calls torch._dynamo.reset().

User program: an actor-learner loop. Three "actor" threads step a compiled policy
(torch.compile, backend="eager") on observations as fast as they can. A "hot-reload" thread
plays the learner: every ~2 ms it publishes new weights, and, because each reload builds a new
compiled policy around the new weight tensors (which would pile up cache entries until the
recompile limit), it first calls torch._dynamo.reset() "to drop the stale graphs", then swaps
the shared policy reference. The actors always read the current reference. The program runs
for 12 s, prints the step count and exits 0 if it survives. It does not enable faulthandler,
and it shortens the GIL switch interval (sys.setswitchinterval(1e-5): "actors get fairer
turns"), which widens the race window.
What should happen: R5. reset() clears every code object's cache entries under compile_lock,
but an actor's cache lookup, guard evaluation and the insertion of a freshly compiled entry run
outside that lock, so the C++ eval frame touches freed cache entries: the process dies of
SIGSEGV (sometimes SIGFPE), rc -11 / -8, usually within seconds, with no Python output unless a
fault handler is installed (the harness installs one: the crashing thread is then in
torch/_dynamo/eval_frame.py compile_wrapper, another in torch/_dynamo/__init__.py reset).
Seen here too: SIGABRT after `terminate called after throwing an instance of
'std::bad_array_new_length'` (a corrupted size read in C++, same crashing frames), and
`Exception ignored in: <function Tracker.add.<locals>.<lambda>>` ... `KeyError` printed from
Dynamo's weakref tracker before the crash. Rarer: `NameError: name '__compiled_fn_...' is not
defined` in an actor (R6's face).
Expected classification: ABORT (signal), race R5.
"""

import sys
import threading
import time

import torch

torch.set_num_threads(1)
sys.setswitchinterval(1e-5)
RUN_FOR_S = 12.0


def make_policy(w1, w2):
    def policy(obs):
        h = torch.tanh(obs @ w1)
        return torch.distributions.Categorical(logits=h @ w2).probs.argmax(-1)

    return torch.compile(policy, backend="eager")


def main():
    current = {"policy": make_policy(torch.randn(16, 32), torch.randn(32, 4)), "version": 0}
    stop = threading.Event()
    steps = [0, 0, 0]

    def actor(i):
        obs = torch.randn(8, 16)
        while not stop.is_set():
            current["policy"](obs)
            steps[i] += 1

    def hot_reload():
        while not stop.is_set():
            time.sleep(0.002)
            new_w1, new_w2 = torch.randn(16, 32), torch.randn(32, 4)
            torch._dynamo.reset()  # drop the graphs compiled around the old weights
            current["policy"] = make_policy(new_w1, new_w2)
            current["version"] += 1

    threads = [threading.Thread(target=actor, args=(i,), name=f"actor-{i}") for i in range(3)]
    threads.append(threading.Thread(target=hot_reload, name="hot-reload"))
    print("actors running", flush=True)
    for t in threads:
        t.start()
    time.sleep(RUN_FOR_S)
    stop.set()
    for t in threads:
        t.join()
    print(f"{sum(steps)} actor steps, {current['version']} weight versions", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
