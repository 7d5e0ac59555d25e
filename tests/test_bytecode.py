"""dflash.bytecode: our own bytecode cache where torch ships none, filled beside the import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dflash import bytecode


@pytest.fixture
def no_prefix(monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", None)  # start() sets it; the test's end restores it
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)  # and this, for its children


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `fakepkg` with no bytecode beside its sources and none allowed to be written."""
    pkg = tmp_path / "src" / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("Y = 2\n")
    (pkg / "tests").mkdir()
    (pkg / "tests" / "test_x.py").write_text("")
    (pkg / "bad.py").write_text("def (:\n")  # Python refuses it too: skipped, not fatal
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    return pkg


def test_where_torch_has_bytecode_it_does_nothing(no_prefix):
    # CI's torch, as pip installs it, has its bytecode; an image without it is the next test's case
    if not os.path.exists(bytecode._cached_at(bytecode._origin("torch"), None)):
        pytest.skip("this torch has no bytecode beside its sources")
    assert bytecode.start() == bytecode.Start("torch-has-bytecode")
    assert sys.pycache_prefix is None and "PYTHONPYCACHEPREFIX" not in os.environ


def test_off_and_a_prefix_of_the_users_are_left_alone(no_prefix, monkeypatch, tmp_path):
    assert bytecode.start(setting="off").state == "off"
    monkeypatch.setenv(bytecode.ENV, "off")
    assert bytecode.start().state == "off"
    assert bytecode.start(package="no_such_package_here", setting="").state == "off"
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    assert bytecode.start(setting="").state == "prefix-set"
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(bytecode, "_cached_at", lambda source, prefix: str(tmp_path / "absent.pyc"))
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a cache folder it may not write
    assert bytecode.start(setting=str(tmp_path / "ro")).state == "off" and sys.pycache_prefix is None


def test_a_package_without_bytecode_is_compiled_into_the_cache_once(no_prefix, package, tmp_path):
    cache = str(tmp_path / "cache")
    first = bytecode.start("fakepkg", cache, fill_packages=("fakepkg",), stdlib=False)
    assert first.state == "filling" and sys.pycache_prefix == cache and first.note().startswith("bytecode:")
    assert os.environ["PYTHONPYCACHEPREFIX"] == cache
    assert first.filler.wait(60) == 0
    for name in ("__init__.py", "sub/mod.py"):
        assert os.path.exists(bytecode._cached_at(str(package / name), cache)), name
    assert not os.path.exists(bytecode._cached_at(str(package / "tests" / "test_x.py"), cache))
    assert not (package / "__pycache__").exists()  # nothing written beside the sources
    sys.pycache_prefix = None
    again = bytecode.start("fakepkg", cache, fill_packages=("fakepkg",), stdlib=False)
    assert (again.state, again.filler, again.note()) == ("cached", None, "")
    assert sys.pycache_prefix == cache


def test_a_second_filler_leaves_the_fill_to_the_first(package, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    done = str(cache / "filled-x")
    code = (
        "import fcntl, sys; from dflash import bytecode; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX);"
        " print(bytecode.fill(sys.argv[2], 1, [sys.argv[3]], False))"
    )
    argv = [sys.executable, "-c", code, str(cache / ".fill.lock"), done, str(package)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0" and not os.path.exists(done)
    argv[2] = code.replace("fcntl.flock(f, fcntl.LOCK_EX);", "")
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3" and os.path.exists(done)  # __init__, sub/__init__, sub/mod: not bad.py, tests/


def test_sources_lists_packages_top_level_first_then_the_standard_library():
    paths = bytecode.sources([os.path.dirname(bytecode.__file__)])
    assert next(paths).endswith(os.path.join("dflash", "__init__.py"))
    rest = list(paths)
    assert any(p.endswith(os.sep + "argparse.py") for p in rest)
    assert not any(os.sep + "site-packages" + os.sep in p for p in rest if "dflash" not in p)


def test_train_and_bench_start_it_before_torch_is_imported_and_only_for_good_input():
    code = """
import sys
from dflash import cli
class Probe:
    def start(self):
        print("torch" in sys.modules)
        raise SystemExit(7)
cli.bytecode.start = Probe().start
sys.exit(cli.main(sys.argv[1:]))
"""
    for argv in (["train"], ["bench"]):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        assert (out.returncode, out.stdout) == (7, "False\n"), out.stderr
    bad = subprocess.run([sys.executable, "-c", code, "train", "--set", "nope=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
