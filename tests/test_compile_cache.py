"""Portable compile caches: a bad path is one clear error before anything runs; what one process
compiled loads into another's empty caches."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dflash import compile_cache
from harness.runtime.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
import sys, torch
from dflash import compile_cache
print(compile_cache.load(sys.argv[1]))
f = torch.compile(lambda x: (x.sin() * 2).sum(), backend="inductor")
f(torch.randn(8))
print(compile_cache.save(sys.argv[1]))
print("misses", torch._dynamo.utils.counters["inductor"]["fxgraph_cache_miss"],
      "hits", torch._dynamo.utils.counters["inductor"]["fxgraph_cache_hit"])
"""


def test_a_folder_or_a_missing_parent_is_refused_in_one_line(tmp_path):
    compile_cache.check(None)
    compile_cache.check(str(tmp_path / "cache.bin"))
    with pytest.raises(ConfigError, match="is a folder"):
        compile_cache.check(str(tmp_path))
    with pytest.raises(ConfigError, match="does not exist"):
        compile_cache.check(str(tmp_path / "no" / "cache.bin"))


def test_a_file_torch_cannot_read_is_a_config_error(tmp_path):
    bad = tmp_path / "cache.bin"
    bad.write_bytes(b"not a cache")
    with pytest.raises(ConfigError, match="could not be loaded by torch"):
        compile_cache.load(str(bad))


def test_what_one_process_compiled_is_a_cache_hit_in_a_fresh_one(tmp_path):
    path = str(tmp_path / "cache.bin")

    def run(cache_dir):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache_dir), "PYTHONPATH": ROOT}
        done = subprocess.run(
            [sys.executable, "-c", PROGRAM, path], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.splitlines()

    cold = run("a")
    assert "not found: compiling cold" in cold[0] and cold[1].startswith("wrote ") and "inductor" in cold[1]
    assert cold[-1] == "misses 1 hits 0"
    preloaded = run("b")  # another, empty Inductor cache
    assert preloaded[0].startswith("loaded ") and "inductor" in preloaded[0]
    assert preloaded[-1] == "misses 0 hits 1"
