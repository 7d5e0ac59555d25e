"""harness.inject under tracing: `stress --fix` must not break a program that traces compiled code.

Each program runs in its own interpreter: install() patches torch.compile and FX's tracer for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TRACE_COMPILED_SUBMODULE = """
import torch
from harness import inject
from harness.runtime.fixes import FIXES
inject.install({fixes!r})

class Encoder(torch.nn.Module):
    def forward(self, x, mask):
        return (x * 2).relu() * mask

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.compile(Encoder(), backend="eager")

    def forward(self, x, mask):
        return self.encoder(x, mask) + 1

traced = torch.fx.symbolic_trace(Model())  # the compiled encoder gets two FX Proxies
x, mask = torch.randn(3), torch.ones(3)
assert torch.equal(traced(x, mask), (x * 2).relu() + 1)
print("ops", sorted(str(n.target) for n in traced.graph.nodes if n.op.startswith("call")))
"""


def run(program: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("fixes", ["nested-fx-fallback", "phase-lock,nested-fx-fallback"])
def test_symbolic_trace_of_a_module_with_a_compiled_submodule(fixes):
    # Was: TraceError `Proxy object cannot be iterated` from the wrapper's key (tuple(proxy.shape)).
    out = run(TRACE_COMPILED_SUBMODULE.format(fixes=fixes))
    assert "<built-in function mul>" in out and "'relu'" in out


def test_phase_lock_runs_every_trace_alone():
    # A trace has no steady state: its calls are never shared, however often the same root is traced.
    out = run(
        """
        import torch
        from harness import inject
        from harness.runtime.fixes import FIXES
        inject.install("phase-lock")
        for _ in range(5):
            torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
        print(FIXES["phase-lock"].stats())
        """
    )
    assert out.strip().splitlines()[-1] == "{'exclusive': 5, 'shared': 0, 'compiles_while_shared': 0}"
