"""Torch injection points: resolution in the installed torch, hooks, hit counts, lazy install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from harness.faults import points
from harness.faults.points import TORCH_POINTS, Point

REPO = Path(__file__).resolve().parents[1]

# Points that the CPU compile path reaches (hit counts on 2.13 CPU); the cudagraph ones resolve on
# a CPU build too (the module imports without CUDA).
CPU_POINTS = (
    "fx.trace",
    "fx.create_node",
    "make_fx.dispatch_trace",
    "dynamo.convert_frame",
    "inductor.compile_fx",
    "aot.backward_compile",
    "compiled.call",
    "dynamo.reset",
)


@pytest.fixture
def calls():
    seen: list[tuple[str, str]] = []
    points.uninstall_all()
    yield seen
    points.uninstall_all()


def test_every_point_resolves_or_is_reported_unavailable(calls):
    got = points.install_now(list(TORCH_POINTS), lambda p, w: calls.append((p, w)))
    assert set(got) | set(points.unavailable()) == set(TORCH_POINTS)
    for name in CPU_POINTS + ("cudagraph.get_container", "cudagraph.record"):
        assert name in got, f"{name}: {points.unavailable().get(name)}"
        assert got[name] in TORCH_POINTS[name].targets


def test_missing_target_is_unavailable_not_a_crash(calls, monkeypatch):
    monkeypatch.setitem(
        TORCH_POINTS,
        "fake.gone",
        Point(name="fake.gone", targets=("torch.fx.graph:Graph.no_such_method", "no_such_mod:f"), why="t"),
    )
    got = points.install_now(["fake.gone"], lambda p, w: None)
    assert "fake.gone" not in got
    assert "none of" in points.unavailable()["fake.gone"]


def test_hook_runs_before_and_after_and_hits_are_counted(calls):
    import torch

    points.install_now(["fx.trace", "fx.create_node", "dynamo.reset"], lambda p, w: calls.append((p, w)))
    torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    torch._dynamo.reset()
    assert calls[0] == ("fx.trace", "before") and ("fx.trace", "after") in calls
    assert calls.count(("fx.create_node", "before")) == points.HITS["fx.create_node"] >= 3
    assert points.HITS["fx.trace"] == 1 and points.HITS["dynamo.reset"] == 1
    points.uninstall_all()
    assert not hasattr(torch.fx.Tracer.trace, "__harness_point__")


def test_compiled_call_point_is_hit_on_every_compiled_call(calls):
    import torch

    points.install_now(["compiled.call"], lambda p, w: calls.append((p, w)))
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")  # binds the check at compile()
    for _ in range(3):
        fn(torch.ones(2))
    assert points.HITS["compiled.call"] >= 3


def test_backward_point_is_hit_by_the_first_backward(calls):
    import torch

    points.install_now(["aot.backward_compile"], lambda p, w: calls.append((p, w)))
    lin = torch.nn.Linear(3, 3)
    fn = torch.compile(lambda x: lin(x).relu().sum(), backend="aot_eager")
    fn(torch.randn(2, 3)).backward()
    assert points.HITS["aot.backward_compile"] >= 1, points.installed()


def test_a_raising_hook_propagates_to_the_caller(calls):
    import torch

    def hook(point, when):
        raise RuntimeError(f"injected at {point}")

    points.install_now(["fx.trace"], hook)
    with pytest.raises(RuntimeError, match="injected at fx.trace"):
        torch.fx.symbolic_trace(torch.nn.Linear(2, 2))


def test_static_and_class_methods_stay_what_they_were(calls, monkeypatch):
    mod = types.ModuleType("fake_points_mod")

    class K:
        @staticmethod
        def s(x):
            return x + 1

        @classmethod
        def c(cls, x):
            return (cls.__name__, x)

    mod.K = K
    monkeypatch.setitem(sys.modules, "fake_points_mod", mod)
    monkeypatch.setitem(TORCH_POINTS, "fake.s", Point(name="fake.s", targets=("fake_points_mod:K.s",), why="t"))
    monkeypatch.setitem(TORCH_POINTS, "fake.c", Point(name="fake.c", targets=("fake_points_mod:K.c",), why="t"))
    monkeypatch.setattr(points, "PRELOAD", ())
    points.install_now(["fake.s", "fake.c"], lambda p, w: calls.append((p, w)))
    assert isinstance(K.__dict__["s"], staticmethod) and isinstance(K.__dict__["c"], classmethod)
    assert K.s(1) == 2 and K().s(1) == 2 and K.c(3) == ("K", 3)
    assert [p for p, w in calls if w == "before"] == ["fake.s", "fake.s", "fake.c"]


LAZY = """
    import json, sys
    from harness.faults import points
    hits = []
    points.install_lazily(["fx.trace", "aot.backward_compile", "compiled.call"],
                          lambda p, w: hits.append((p, w)))
    before = dict(points.installed())
    import torch
    after_torch = dict(points.installed())
    torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    import torch._dynamo, torch._functorch.aot_autograd
    print(json.dumps({"before": before, "after_torch": sorted(after_torch),
                      "final": sorted(points.installed()), "hits": sorted(set(p for p, _ in hits)),
                      "runtime_wrappers_early": "torch._functorch._aot_autograd.runtime_wrappers" in after_torch}))
"""


def test_lazy_install_waits_for_each_module_and_imports_nothing():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LAZY)], env=env, cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["before"] == {}  # torch not imported by installing
    assert "fx.trace" in res["after_torch"] and "aot.backward_compile" not in res["after_torch"]
    assert {"fx.trace", "aot.backward_compile", "compiled.call"} <= set(res["final"])
    assert res["hits"] == ["fx.trace"]


def test_every_point_says_why():
    for p in TORCH_POINTS.values():
        assert p.why and p.targets and all(":" in t for t in p.targets), p.name
