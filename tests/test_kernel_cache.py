"""harness.trial.kernel_cache: after a trial the runner removes the kernel .so files a killed link
left unfinished in Inductor's cache (catalogue row inductor-cache), and nothing else: not a whole
library, not one older than the trial, not one a live process is still writing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.trial import kernel_cache
from harness.trial.outcome import Outcome
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec


@pytest.fixture(scope="module")
def elf() -> bytes:
    import torch

    return (Path(torch.__file__).parent / "lib" / "libc10.so").read_bytes()  # a whole ELF library


def test_whole_and_truncated_elf_files(tmp_path, elf):
    whole, cut, empty, text = (tmp_path / n for n in ("whole.so", "cut.so", "empty.so", "text.so"))
    whole.write_bytes(elf)
    cut.write_bytes(elf[: len(elf) // 2])
    empty.write_bytes(b"")
    text.write_bytes(b"not a library at all, long enough to hold an ELF header if it were one....")
    assert kernel_cache.whole_elf(whole)
    assert not any(kernel_cache.whole_elf(p) for p in (cut, empty, text))


def test_removes_only_new_unfinished_kernels_nobody_holds(tmp_path, elf):
    root = tmp_path / "cache" / "ab"
    root.mkdir(parents=True)
    old_cut, whole, new_cut, empty, held = (root / f"{n}.so" for n in ("old", "whole", "new", "empty", "held"))
    for p in (old_cut, new_cut, held):
        p.write_bytes(elf[:4096])
    whole.write_bytes(elf)
    empty.write_bytes(b"")
    past = time.time() - 3600
    os.utime(old_cut, (past, past))
    since = time.time() - 60
    # A live writer (another trial's linker) holds this one open.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'ab'); time.sleep(60)", str(held)]
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and os.path.realpath(held) not in (kernel_cache._open_elsewhere() or ()):
            time.sleep(0.05)
        removed = kernel_cache.remove_unfinished(tmp_path / "cache", since)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in removed) == ["empty.so", "new.so"]
    assert old_cut.exists() and whole.exists() and held.exists()
    assert not new_cut.exists() and not empty.exists()


def test_a_kernel_whose_linker_finished_during_the_scan_is_kept(tmp_path, elf, monkeypatch):
    """Cut when first looked at, whole by the time the open files were listed: another process's
    linker just closed it, and a process may be loading it (the CI's ImportError: no such file)."""
    kernel = tmp_path / "cache" / "cd" / "k.so"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(elf[:4096])

    def linker_finishes() -> set[str]:
        kernel.write_bytes(elf)
        return set()

    monkeypatch.setattr(kernel_cache, "_open_elsewhere", linker_finishes)
    assert kernel_cache.remove_unfinished(tmp_path / "cache", time.time() - 60) == []
    assert kernel_cache.whole_elf(kernel)


def test_cache_dir_follows_the_environment(tmp_path):
    assert kernel_cache.cache_dir({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert kernel_cache.cache_dir({}).name.startswith("torchinductor_")


def test_the_runner_removes_what_a_killed_trial_left(tmp_path, elf):
    # The trial writes half a kernel into its cache, as a g++ killed mid-link leaves it, and hangs.
    cache = tmp_path / "inductor"
    target = cache / "xy" / "kernel.so"
    code = (
        f"import os, time; os.makedirs({str(target.parent)!r}, exist_ok=True); "
        f"open({str(target)!r}, 'wb').write(bytes(100)); print('wrote', flush=True); time.sleep(120)"
    )
    spec = TrialSpec(
        trial_id="t",
        cell="c",
        timeout_s=60,
        hang_s=3.0,
        env={"TORCHINDUCTOR_CACHE_DIR": str(cache)},
        workload=WorkloadSpec(kind="command", argv=(sys.executable, "-c", code)),
    )
    result = run_trial(spec, tmp_path / "trial")
    assert result.outcome is Outcome.HANG
    assert not target.exists()
    assert "removed 1 unfinished kernel(s) from Inductor's cache: kernel.so" in result.detail
