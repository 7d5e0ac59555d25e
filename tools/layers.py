"""The project's import graph, read from the source (AST, nothing imported): cycles, imports that
go up the harness's layers, and imports inside functions.

    python -m tools.layers            # prints the layers and every problem; exit 1 if any

The harness is layered: a module may import its own layer and the layers below it, never one
above. `tests/test_layers.py` holds the project to zero problems.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dflash", "harness", "tools", "repro")
SCRIPTS = ("repro",)
"""Standalone scripts: they import torch inside main() so that `--help` and a bad argument run
without it (tests/test_repro_scripts.py holds them to that), so their function-level imports
are not listed."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("in-program runtime", ("harness.runtime",)),
    ("shared helpers", ("harness.args", "harness.stats", "harness.text")),
    ("fault injection", ("harness.faults",)),
    ("fix injection", ("harness.inject",)),
    ("one trial", ("harness.trial",)),
    ("result stores", ("harness.stores",)),
    ("naming failures", ("harness.diagnosis",)),
    ("many trials", ("harness.campaign",)),
    ("reading stores", ("harness.analysis",)),
    ("benchmarks", ("harness.bench",)),
    ("commands", ("harness.commands",)),
    ("command line", ("harness.cli", "harness.__main__", "harness")),
)
"""Bottom first. `dflash` (the trainer) imports the runtime and nothing else of the harness; the
runtime imports neither."""
RUNTIME = "harness.runtime"

DEFERRED = (
    "torch", "triton", "transformers", "safetensors", "datasets", "matplotlib", "scipy", "ray", "pytest_run_parallel",
)  # fmt: skip
"""Imports a function may defer, with a one-line reason: each costs a second or more at start,
and most commands never need them (the harness parent process does not import torch). Ray is
also an optional extra (`--backend ray`), absent where it is not installed; pytest-run-parallel
imports pytest, which only the hunt's runs load."""


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module
    target: str  # the project module imported, or the external top-level name
    line: int
    in_function: bool
    reason: str  # the comment on the import's line or the line above, if any


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _comment(lines: list[str], lineno: int) -> str:
    """The comment on the import's line, or above the block of imports it stands in."""
    here = lines[lineno - 1]
    if "#" in here:
        return here.split("#", 1)[1].strip()
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
        i -= 1
    above = lines[i].strip() if i >= 0 else ""
    return above[1:].strip() if above.startswith("#") else ""


def imports(root: Path = ROOT) -> Iterator[Import]:
    known = modules(root)
    for module, path in known.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        is_package = path.name == "__init__.py"
        yield from _walk(ast.parse(text), module, is_package, known, lines, in_function=False)


def _walk(
    node: ast.AST, module: str, is_package: bool, known: dict[str, Path], lines: list[str], *, in_function: bool
) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        names: list[str] = []
        if isinstance(child, ast.Import):
            names = [a.name for a in child.names]
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = module.split(".")[: len(module.split(".")) - child.level + (1 if is_package else 0)]
                source = ".".join(base + ([child.module] if child.module else []))
            else:
                source = child.module or ""
            # `from pkg import mod` imports the module pkg.mod when there is one
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in child.names]
        for name in dict.fromkeys(names):
            target = _resolve(name, known) or name.split(".")[0]
            if target != module:
                yield Import(module, target, child.lineno, in_function, _comment(lines, child.lineno))
        yield from _walk(child, module, is_package, known, lines, in_function=nested)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> int | None:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return best[0] if best else None


class _Tarjan:
    """Tarjan's strongly connected components, iteratively (an import graph is deep enough to
    overflow Python's recursion)."""

    def __init__(self, edges: dict[str, set[str]]) -> None:
        self.edges, self.index, self.low = edges, {}, {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[list[str]] = []

    def _enter(self, v: str, work: list) -> None:
        self.index[v] = self.low[v] = len(self.index)
        self.stack.append(v)
        self.on_stack.add(v)
        work.append((v, iter(sorted(self.edges.get(v, ())))))

    def _leave(self, v: str, work: list) -> None:
        if work:
            parent = work[-1][0]
            self.low[parent] = min(self.low[parent], self.low[v])
        if self.low[v] != self.index[v]:
            return
        component = []
        while not component or component[-1] != v:
            component.append(self.stack.pop())
            self.on_stack.discard(component[-1])
        if len(component) > 1:
            self.found.append(sorted(component))

    def visit(self, start: str) -> None:
        work: list = []
        self._enter(start, work)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                self._leave(v, work)
            elif w not in self.index:
                self._enter(w, work)
            elif w in self.on_stack:
                self.low[v] = min(self.low[v], self.index[w])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module."""
    tarjan = _Tarjan(edges)
    for start in sorted(edges):
        if start not in tarjan.index:
            tarjan.visit(start)
    return tarjan.found


def problems(root: Path = ROOT) -> list[str]:
    """Every cycle, upward import and unexplained function-level import, one line each."""
    known = modules(root)
    edges: dict[str, set[str]] = defaultdict(set)
    out = []
    for imp in imports(root):
        internal = imp.target in known
        if internal:
            edges[imp.module].add(imp.target)
        where = f"{known[imp.module].relative_to(root)}:{imp.line}"
        if (
            internal
            and imp.module.startswith("dflash")
            and imp.target.startswith("harness")
            and not _within(imp.target, RUNTIME)
        ):
            out.append(f"{where}: the trainer imports the harness ({imp.target})")
        if internal and _within(imp.module, RUNTIME) and not _within(imp.target, RUNTIME):
            out.append(f"{where}: the runtime imports {imp.target} (it must stand alone)")
        low, high = layer_of(imp.module), layer_of(imp.target)
        if internal and low is not None and high is not None and high > low:
            out.append(
                f"{where}: {imp.module} ({LAYERS[low][0]}) imports {imp.target} ({LAYERS[high][0]}), a layer above"
            )
        if imp.in_function and not imp.module.startswith(SCRIPTS):
            heavy = imp.target.split(".")[0] in DEFERRED or (internal and imports_torch(imp.target, root))
            if not heavy:
                out.append(f"{where}: {imp.module} imports {imp.target} inside a function (no heavy import to defer)")
            elif not imp.reason:
                out.append(f"{where}: {imp.module} defers {imp.target} without a one-line reason")
    out += [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    return out


def imports_torch(module: str, root: Path = ROOT) -> bool:
    """Whether importing `module` imports a DEFERRED library at module level (through the project)."""
    return module in _heavy_modules(root)


@functools.cache
def _heavy_modules(root: Path) -> frozenset[str]:
    known = modules(root)
    top: dict[str, set[str]] = defaultdict(set)
    for imp in imports(root):
        if not imp.in_function:
            top[imp.module].add(imp.target)
    heavy = {m for m, targets in top.items() if any(t.split(".")[0] in DEFERRED for t in targets)}
    grew = True
    while grew:  # to a fixed point: a module is heavy when it imports a heavy one
        more = {m for m, targets in top.items() if m not in heavy and any(t in heavy for t in targets if t in known)}
        heavy |= more
        grew = bool(more)
    return frozenset(heavy)


def main() -> int:
    for i, (name, prefixes) in enumerate(LAYERS):
        print(f"{i}. {name}: {', '.join(prefixes)}")
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
