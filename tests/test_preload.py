"""dflash.preload: torch's libraries asked into the page cache before the trainer imports torch."""

from __future__ import annotations

import os
import subprocess
import sys

from dflash import preload
from dflash.preload import Preload


def test_it_finds_torchs_libraries_without_importing_torch():
    code = "import sys; from dflash import preload; print(*preload.library_paths()); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    paths = out[0].split()
    assert out[1] == "False"
    assert any(os.path.basename(p).startswith("libtorch_cpu.so") for p in paths)
    assert all(os.sep + "lib" + os.sep in p and os.path.isfile(p) for p in paths)
    # torch's own first: it is the one that loads the others
    assert os.sep + "torch" + os.sep in paths[0]


def test_a_missing_package_or_folder_gives_nothing(tmp_path):
    assert list(preload.library_paths(("no_such_package_here",))) == []
    assert preload._listdir(str(tmp_path / "absent")) == []


def test_the_thread_advises_each_file_and_skips_what_it_cannot_open(tmp_path):
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"\0" * 4096)
    p = Preload(iter([str(lib), str(tmp_path / "gone.so")])).start()
    assert p._thread.name == "preload" and p._thread.daemon
    p._thread.join(10)
    assert (p.files, p.bytes) == (1, 4096)
    assert p.seconds is not None


def test_train_and_bench_start_it_before_torch_is_imported():
    code = """
import sys
from dflash import cli
class Probe:
    def start(self):
        print("torch" in sys.modules)
        raise SystemExit(7)
cli.Preload = Probe
cli.main([sys.argv[1]])
"""
    for command in ("train", "bench"):
        out = subprocess.run([sys.executable, "-c", code, command], capture_output=True, text=True)
        assert (out.returncode, out.stdout) == (7, "False\n"), out.stderr
