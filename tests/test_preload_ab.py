"""tools/preload_ab: the read-ahead variants it times against a plain `import torch`."""

from __future__ import annotations

import os
import subprocess
import sys

from tools import preload_ab


def test_it_finds_torchs_libraries_without_importing_torch():
    code = "import sys; from tools import preload_ab as p; print(*p.library_paths()); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    paths = out[0].split()
    assert out[1] == "False"
    assert any(os.path.basename(p).startswith("libtorch_cpu.so") for p in paths)
    assert all(os.sep + "lib" + os.sep in p and os.path.isfile(p) for p in paths)
    assert os.sep + "torch" + os.sep in paths[0]
    assert list(preload_ab.library_paths(("no_such_package_here",))) == []


def test_each_variant_reads_in_a_named_daemon_thread_and_skips_what_it_cannot_open(tmp_path):
    preload_ab.advise([str(tmp_path / "gone.so")])  # no error
    assert preload_ab.start("none") is None
    for variant in ("libs", "read"):
        t = preload_ab.start(variant)
        assert t is not None and t.name == "preload" and t.daemon
        t.join(60)
        assert not t.is_alive()


def test_a_run_times_the_import_and_a_first_gemm():
    imported, gemm = preload_ab.run("libs", "cpu")
    assert 0 < imported <= gemm
