"""Agent tool calls (eager modules) in a ThreadPoolExecutor beside an FX-tracing tool; failures logged, exit 0.

User program: an LLM agent's tool-calling loop (the shape of argonne-lcf/ChemGraph#110). Each
turn the agent submits its tool calls to a ThreadPoolExecutor: `energy` and `embed` evaluate small
eager nn.Modules (no torch.compile anywhere). One tool, `inspect_model`, runs in its own thread
for the whole session and symbolic_traces a copy of the energy model with torch.fx, to report its
op graph to the agent. The loop waits for each call and, for a failed one, only logs
`future.exception()` (`tool energy failed: NameError: ...`) and lets the agent go on; the session
ends with a summary line and exit 0.
What should happen: R4. Tracer.trace patches nn.Module.__call__ on the class, process-wide, so an
eager module call in a pool thread that lands during a trace enters the tracer's
module_call_wrapper and fails in path_of_module with `NameError: module is not installed as a
submodule` (most calls: the inspect thread traces back to back). No traceback is printed, only
the logged one-line messages; no `Exception in thread` header; exit 0.
Expected classification: CRASH (the race's face at exit 0), race R4.
"""

import copy
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO, format="%(levelname)s agent: %(message)s")
log = logging.getLogger("agent")


class EnergyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 32)
        self.head = nn.Sequential(nn.SiLU(), nn.Linear(32, 1))

    def forward(self, positions):
        return self.head(self.embed(positions)).sum()


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return torch.nn.functional.normalize(self.proj(x), dim=-1)


def main():
    torch.manual_seed(0)
    energy_model, embedder = EnergyModel().eval(), Embedder().eval()

    @torch.no_grad()
    def energy():
        return float(energy_model(torch.randn(12, 3)))

    @torch.no_grad()
    def embed():
        return embedder(torch.randn(4, 16)).shape[0]

    tools = {"energy": energy, "embed": embed}
    session_over = threading.Event()

    def inspect_model():
        # the agent's long-running inspection tool: re-traces until the session ends
        snapshot = copy.deepcopy(energy_model)
        traces = 0
        while not session_over.is_set():
            torch.fx.symbolic_trace(snapshot)
            traces += 1
        return traces

    ok = failed = 0
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="tool") as pool:
        inspector = pool.submit(inspect_model)
        for turn in range(40):
            calls = [(name, pool.submit(tools[name])) for name in ("energy", "embed", "energy")]
            for name, future in calls:
                exc = future.exception()
                if exc is None:
                    ok += 1
                else:
                    failed += 1
                    log.warning("turn %d: tool %s failed: %s: %s", turn, name, type(exc).__name__, exc)
        session_over.set()
        traces = inspector.result()
    log.info("session done: %d tool calls ok, %d failed; model inspected %d times", ok, failed, traces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
