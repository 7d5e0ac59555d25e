"""Each fault as program text: `setup()` builds the shared state, `work(state, item)` is one
worker's job, `partner(state, stop)` is the racing thread's loop (none for `none` and
`deterministic`), and `FIRED` is the message a worker's exception must match for the fault to
count as fired.

The rates behind the choices (torch 2.13.0+cpu, 2 loaded cores): the corpus programs these follow
(tests/foreign/shapes) fire every run with a tracer thread tracing back to back (F2, R4), a reset
every few ms (R5) or a refresher changing a dict's keys (dict-mutation); a 1 us switch interval
makes the workers meet the partner inside its window within the first calls.
"""

from __future__ import annotations

COMPILED = """
def setup():
    def score(x):
        return torch.tanh(x @ x.T).sum(-1)

    fn = torch.compile(score, backend="eager")
    x = torch.randn(8, 8)
    fn(x)  # compiled once in the main thread
    return {"fn": fn, "x": x}


def work(state, item):
    deadline = time.monotonic() + WORK_S
    while time.monotonic() < deadline:
        state["fn"](state["x"])
"""

TRACER = """
class Post(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).cumsum(-1)


def partner(state, stop):
    post = Post()
    while not stop.is_set():
        torch.fx.symbolic_trace(post)
"""

NONE = COMPILED + "\npartner = None\n"

DETERMINISTIC = (
    COMPILED.replace("def work(", "def _unused_work(")
    + """

def work(state, item):
    scores = state["fn"](state["x"])
    if scores.shape[-1] != 16:  # the program's own bug: the scorer returns 8 scores
        raise ValueError(f"expected 16 scores, got {scores.shape[-1]}")


partner = None
"""
)

F2 = COMPILED + TRACER

R4 = (
    """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.head = nn.Sequential(nn.SiLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.head(self.proj(x))


def setup():
    return {"net": Net().eval(), "x": torch.randn(8, 16)}


def work(state, item):
    deadline = time.monotonic() + WORK_S
    with torch.no_grad():
        while time.monotonic() < deadline:
            state["net"](state["x"])  # an eager module call
"""
    + TRACER
)

DICT_MUTATION = """
KEYS = 48


def setup():
    def score(features, x):
        total = x
        for value in features.values():
            total = total + value.sum()
        return total

    features = {f"session_{i}": torch.full((4,), float(i)) for i in range(KEYS)}
    fn = torch.compile(score, backend="eager")
    x = torch.zeros(4)
    fn(features, x)
    return {"fn": fn, "x": x, "features": features, "next": KEYS}


def work(state, item):
    deadline = time.monotonic() + WORK_S
    while time.monotonic() < deadline:
        state["fn"](state["features"], state["x"])  # the live dict the refresher changes


def partner(state, stop):
    features = state["features"]
    while not stop.is_set():
        i = state["next"]
        features[f"session_{i}"] = torch.full((4,), float(i))
        features.pop(f"session_{i - KEYS}", None)
        state["next"] = i + 1
        time.sleep(0.001)
"""

R5 = """
def make_policy():
    w1, w2 = torch.randn(16, 32), torch.randn(32, 4)

    def policy(obs):
        return torch.tanh(obs @ w1) @ w2

    return torch.compile(policy, backend="eager")


def setup():
    state = {"fn": make_policy(), "x": torch.randn(8, 16)}
    state["fn"](state["x"])
    return state


def work(state, item):
    deadline = time.monotonic() + WORK_S
    while time.monotonic() < deadline:
        state["fn"](state["x"])


def partner(state, stop):
    while not stop.is_set():
        time.sleep(0.002)
        torch._dynamo.reset()  # drop the stale graphs, then swap the policy
        state["fn"] = make_policy()
"""

GPU_MODEL = """
def make_model():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)).cuda()

"""

REDUCE_OVERHEAD = (
    GPU_MODEL
    + """
def setup():
    fn = torch.compile(make_model().eval(), mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):  # warmed and recorded in the main thread
            fn(torch.randn(8, 64, device="cuda"))
    torch.cuda.synchronize()
    return {"fn": fn}


def work(state, item):
    x = torch.randn(8 * (item + 2), 64, device="cuda")  # each worker serves a batch size of its own
    deadline = time.monotonic() + WORK_S
    with torch.no_grad():
        while time.monotonic() < deadline:
            float(state["fn"](x).sum().item())


partner = None
"""
)

CAPTURE_BESIDE_EAGER = """
def setup():
    w = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    return {"w": w}


def work(state, item):
    w = state["w"]
    deadline = time.monotonic() + WORK_S
    while time.monotonic() < deadline:  # a request's eager work: new tensors, a sync per request
        x = torch.randn(128, 512, device="cuda")
        float((x @ w).softmax(-1)[0, 0].item())


def partner(state, stop):
    w = state["w"]
    while not stop.is_set():  # the decode step captured again, as the CUDA graphs recipe says
        static_in = torch.randn(8, 512, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.relu(static_in @ w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.relu(static_in @ w) @ w
        graph.replay()
"""

AUTOGRAD = (
    GPU_MODEL
    + """
def setup():
    fn = torch.compile(make_model(), mode="reduce-overhead")
    for _ in range(3):  # a few training steps in the main thread first
        fn(torch.randn(16, 64, device="cuda")).square().mean().backward()
    torch.cuda.synchronize()
    return {"fn": fn}


def work(state, item):
    # backward() in a thread of its own, as a trainer that moves the optimizer work off the forward
    # path does: the autograd engine's device thread copies the stash of the thread that calls it,
    # which a fresh thread never had. A worker that ran both in its own thread stayed clean in 2 of 2
    # runs on an H100 (torch 2.11), at the main thread's batch size and at one of its own.
    x = torch.randn(16 * (item + 2), 64, device="cuda")
    deadline = time.monotonic() + WORK_S
    while time.monotonic() < deadline:
        loss, failed = state["fn"](x).square().mean(), []

        def backward():
            try:
                loss.backward()
            except BaseException as exc:  # the worker raises it as its own, as its trainer would
                failed.append(exc)

        helper = threading.Thread(target=backward, name=f"backward-{item}")
        helper.start()
        helper.join()
        if failed:
            raise failed[0]
        float(loss.item())


partner = None
"""
)

SOURCES = {
    "none": NONE,
    "deterministic": DETERMINISTIC,
    "F2": F2,
    "R4": R4,
    "dict-mutation": DICT_MUTATION,
    "R5": R5,
    "reduce-overhead": REDUCE_OVERHEAD,
    "capture-beside-eager": CAPTURE_BESIDE_EAGER,
    "autograd": AUTOGRAD,
}

FIRED = {
    "none": "",
    "deterministic": r"ValueError: expected 16 scores",
    "F2": r"Detected that you are using FX to symbolically trace a dynamo-optimized function",
    "R4": r"module is not installed as a submodule",
    "dict-mutation": r"KeyError|(?:dictionary|OrderedDict) (?:keys changed|changed size|mutated) during iteration",
    "R5": r"name '__compiled_fn_\w*' is not defined",
    # F1's assert has no message; the capture race fails the eager thread or its RNG call.
    "reduce-overhead": r"^AssertionError: $",
    "capture-beside-eager": r"operation not permitted when stream is capturing|previous error during capture|"
    r"Offset increment outside graph capture",
    "autograd": r"^AssertionError: $",
}
"""A worker exception's `Type: message` that is this fault. R5 fires mostly as a native crash,
which the truth reads as a process that started and never ended."""

WORK_S = {
    "none": 0.5,
    "deterministic": 0.5,
    "F2": 0.5,
    "R4": 0.5,
    "dict-mutation": 0.5,
    "R5": 3.0,
    "reduce-overhead": 1.0,
    "capture-beside-eager": 2.0,
    "autograd": 1.0,
}
"""Seconds of calls per worker item: enough for the fault to fire in every run."""
