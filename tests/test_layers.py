"""The project's import graph (tools/layers.py, read from the AST): no import cycle, no import up
the harness's layers, the trainer imports only the runtime of the harness, the runtime imports
neither, and a function-level import only where it defers a heavy library, saying why."""

from __future__ import annotations

from pathlib import Path

from tools import layers


def test_the_project_has_no_import_cycle_and_no_upward_or_unexplained_import():
    assert layers.problems() == []


def test_every_harness_module_sits_in_a_layer():
    unplaced = [m for m in layers.modules() if m.startswith("harness") and layers.layer_of(m) is None]
    assert unplaced == []


def test_the_checker_sees_a_cycle_an_upward_import_and_a_needless_deferred_import(tmp_path):
    # A tree of our own shape, broken three ways: the test fails if the checker goes blind.
    def write(rel: str, text: str) -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    for package in layers.PACKAGES:
        write(f"{package}/__init__.py", "")
    write("harness/trial/__init__.py", "")
    write("harness/trial/a.py", "from harness.trial import b\n")
    write("harness/trial/b.py", "from harness.trial import a\nfrom harness.analysis import c\n")
    write("harness/analysis/__init__.py", "")
    write("harness/analysis/c.py", "def f():\n    import json\n    # torch takes seconds to import\n    import torch\n")
    write("dflash/x.py", "import harness.trial.a\n")
    found = layers.problems(tmp_path)
    assert any(p.startswith("import cycle: harness.trial.a -> harness.trial.b") for p in found), found
    assert any("harness.trial.b (one trial) imports harness.analysis.c (reading stores)" in p for p in found), found
    assert any("c.py:2: harness.analysis.c imports json inside a function" in p for p in found), found
    assert not any("c.py:4" in p for p in found), found  # deferred torch, with its reason
    assert any("the trainer imports the harness" in p for p in found), found


def test_the_runtime_stands_alone_and_the_trainer_may_import_it(tmp_path):
    for package in layers.PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "runtime").mkdir()
    (tmp_path / "harness" / "runtime" / "__init__.py").write_text("")
    (tmp_path / "harness" / "runtime" / "fixes.py").write_text("import dflash.step\n")
    (tmp_path / "harness" / "runtime" / "faults.py").write_text("import harness.stats\n")
    (tmp_path / "harness" / "stats.py").write_text("")
    (tmp_path / "dflash" / "step.py").write_text("import harness.runtime.faults\n")
    found = layers.problems(tmp_path)
    assert "harness/runtime/fixes.py:1: the runtime imports dflash.step (it must stand alone)" in found, found
    assert "harness/runtime/faults.py:1: the runtime imports harness.stats (it must stand alone)" in found, found
    assert not any("the trainer imports the harness" in p for p in found), found


def test_the_registry_lives_in_the_runtime_and_repro_scripts_touch_no_import_path():
    root = layers.ROOT
    in_dflash = [
        p.name
        for p in (root / "dflash").glob("*.py")
        if "FIXES: dict" in p.read_text() or "class FixSet" in p.read_text()
    ]
    assert in_dflash == []
    hacks = [
        p.name
        for p in (root / "repro").glob("*.py")
        if "sys.path.insert" in p.read_text() or "sys.path.append" in p.read_text()
    ]
    assert hacks == []


def test_a_deferred_heavy_import_needs_its_reason(tmp_path):
    for package in layers.PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    Path(tmp_path / "harness" / "guard.py").write_text("def f():\n    import torch\n")
    assert layers.problems(tmp_path) == ["harness/guard.py:2: harness.guard defers torch without a one-line reason"]
