"""Generated test suites for `harness hunt`, ground truth by construction: each test is written from
a pattern (what its body does) and a place (where the body sits), and its verdict follows from them.

Patterns: a clean test, a deterministic bug, two races (R4: an FX trace beside eager calls; F2: a
trace of a compiled function) and the test's own state that threads share (a `sys.stdout` swap,
`pytest.warns`, the `monkeypatch` fixture, a module global it writes). Places: the test function
itself, a helper it calls, a method of a test class.

What hunt should say:
- clean: ok. deterministic: not a race (it fails with one thread too).
- R4, F2: race, named; F3 and dict-mutation may be named beside it (CO_RACES): both run
  `symbolic_trace` in every thread at once. FX's patcher is as process-global as its tracing flag
  (F3, seen once in five clean-clone CI runs beside F2), and one thread's `_autowrap_check`
  iterates the test module's globals while another's patcher writes them ("dictionary changed
  size during iteration", dict-mutation, seen once beside F2 in the eight runs after that).
- own-stdout, own-global: not thread-safe, the test's own state, never a race.
- own-warnings, own-fixture: pytest-run-parallel runs such a test in one thread (its own list of
  thread-unsafe calls and fixtures, followed into the helpers a test calls), where it passes: ok,
  with the reason it ran alone.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

PATTERNS = ("clean", "deterministic", "R4", "F2", "own-stdout", "own-warnings", "own-fixture", "own-global")
PLACES = ("test", "helper", "method")
RACES = ("R4", "F2")
CO_RACES = ("F3", "dict-mutation")
"""Races a race pattern's body may also meet: its concurrent FX traces share CURRENT_PATCHER and
the globals of the module they trace."""

HEAD = '''"""Generated test suite (tests/shapes/suites.py): one test per pattern and place."""

import contextlib
import io
import time
import warnings

import pytest
import torch
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Post(nn.Module):
    """No submodules: tracing it calls no module another thread could be calling eagerly (R4)."""

    def forward(self, x):
        return torch.softmax(x, dim=-1).cumsum(-1)


class Settings:
    mode = 0


TOTAL = 0
'''

BODIES = {
    "clean": """
m, x = Small(), torch.randn(4, 8)
for _ in range(20):
    assert m(x).shape == (4, 8)
""",
    "deterministic": """
total = torch.arange(4).sum().item()
assert total == 7, f"expected 7, got {total}"
""",
    "R4": """
traced, eager, x = Small(), Small(), torch.randn(4, 8)
for _ in range(500):
    torch.fx.symbolic_trace(traced)
    eager(x)
""",
    "F2": """
fn = torch.compile(lambda t: torch.tanh(t) * 2, backend="eager")
x = torch.randn(4, 8)
post = Post()
for _ in range(500):
    fn(x)
    torch.fx.symbolic_trace(post)
""",
    "own-stdout": """
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    for i in range(40):
        print(f"line {i}")
        time.sleep(0.0005)
assert buf.getvalue().count("\\n") == 40, buf.getvalue().count("\\n")
""",
    "own-warnings": """
for _ in range(20):
    with pytest.warns(UserWarning, match="deprecated"):
        time.sleep(0.0005)
        warnings.warn("deprecated", UserWarning)
""",
    "own-fixture": """
for i in range(40):
    monkeypatch.setattr(Settings, "mode", i)
    time.sleep(0.0005)
    assert Settings.mode == i, (Settings.mode, i)
""",
    "own-global": """
global TOTAL
TOTAL = 0
for i in range(40):
    TOTAL += i
    time.sleep(0.0005)
assert TOTAL == sum(range(40)), TOTAL
""",
}

FIXTURES = {"own-fixture": "monkeypatch"}


@dataclass(frozen=True, order=True)
class TestShape:
    pattern: str
    place: str = "test"

    __test__ = False  # a shape, not a pytest class

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS or self.place not in PLACES:
            raise ValueError(f"test shape {self.pattern}.{self.place}: pattern or place unknown")

    @property
    def name(self) -> str:
        return f"{self.pattern}_{self.place}".replace("-", "_")

    @property
    def test_id(self) -> str:
        """The test's pytest id within its file."""
        return f"TestShape_{self.name}::test_it" if self.place == "method" else f"test_{self.name}"


def all_shapes() -> list[TestShape]:
    return [TestShape(p, q) for p in PATTERNS for q in PLACES]


def source(shape: TestShape) -> str:
    """The test (and its helper) as module source."""
    body = BODIES[shape.pattern].strip("\n")
    arg = FIXTURES.get(shape.pattern, "")
    if shape.place == "helper":
        return (
            f"def _exercise_{shape.name}({arg}):\n{_indent(body, 1)}\n\n\n"
            f"def test_{shape.name}({arg}):\n    _exercise_{shape.name}({arg})\n"
        )
    if shape.place == "method":
        args = ", ".join(filter(None, ("self", arg)))
        return f"class TestShape_{shape.name}:\n    def test_it({args}):\n{_indent(body, 2)}\n"
    return f"def test_{shape.name}({arg}):\n{_indent(body, 1)}\n"


def write_suite(shapes: list[TestShape], folder: Path) -> Path:
    """One file `hunt_generated.py` holding every shape's test, and a pytest.ini making the folder a
    suite of its own; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    tests = "\n\n".join(source(s) for s in shapes)
    (folder / "hunt_generated.py").write_text(HEAD + "\n\n" + tests)
    (folder / "pytest.ini").write_text("[pytest]\npython_files = hunt_*.py\naddopts = -p no:cacheprovider\n")
    return folder


def expected(shape: TestShape) -> str:
    """hunt's verdict for the test (hunt_verdicts' words)."""
    if shape.pattern == "clean":
        return "ok"
    if shape.pattern == "deterministic":
        return "not a race"
    if shape.pattern in ("R4", "F2"):
        return "race"
    if shape.pattern in ("own-warnings", "own-fixture"):
        return "ok"  # pytest-run-parallel's own detection runs it in one thread
    return "not thread-safe"


def single(shape: TestShape) -> bool:
    """Whether pytest-run-parallel runs the test in one thread of its own accord."""
    return shape.pattern in ("own-warnings", "own-fixture")


def _indent(code: str, levels: int) -> str:
    return textwrap.indent(code, "    " * levels)
