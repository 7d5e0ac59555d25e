"""dflash.cuda_context: each CUDA device's context made through the driver before torch's import,
against a stand-in libcuda built here."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys

import pytest

from dflash import cuda_context

FAKE_DRIVER = r"""
static int retained[8], n_retained;
static const int fail_init = FAIL_INIT;
int cuInit(unsigned flags) { return flags == 0 && !fail_init ? 0 : 100; }
int cuDeviceGetCount(int *count) { *count = 2; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = 40 + ordinal; return ordinal < 2 ? 0 : 101; }
int cuDevicePrimaryCtxRetain(void **context, int device) {
    retained[n_retained++] = device;
    *context = (void *)retained;
    return 0;
}
int fake_retained(int i) { return i < n_retained ? retained[i] : -1; }
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """Build the stand-in driver: `driver(fail_init)` -> the path of its shared library."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the stand-in driver")
    folder = tmp_path_factory.mktemp("driver")

    def build(fail_init: bool = False) -> str:
        src, lib = folder / f"cuda{int(fail_init)}.c", folder / f"libcuda{int(fail_init)}.so"
        src.write_text(FAKE_DRIVER.replace("FAIL_INIT", str(int(fail_init))))
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
        return str(lib)

    return build


def retained(library: str) -> list[int]:
    lib = ctypes.CDLL(library)
    return [d for d in map(lib.fake_retained, range(8)) if d >= 0]


def test_ordinals_are_the_cuda_devices_named_each_once():
    assert cuda_context.ordinals(["cuda:1", "cpu", "cuda", "cuda:1", "cuda:0"]) == (0, 1)
    assert cuda_context.ordinals(["cpu", "cpu"]) == ()
    assert cuda_context.ordinals(["cuda:x", "mps:0", "cudax:0"]) == ()


def test_each_named_device_present_gets_its_primary_context_in_a_named_thread(driver):
    lib = driver()
    made = cuda_context.DriverContexts((0, 1, 5), library=lib)
    assert made.start()._thread.name == "cuda-context"
    made.join()
    # ordinal 5 is not on this host (2 devices): left to torch to refuse
    assert (made.made, made.failure, retained(lib)) == ((0, 1), "", [40, 41])


def test_remap_folds_ordinals_onto_the_devices_there_are(driver):
    lib = driver()
    before = retained(lib)
    made = cuda_context.DriverContexts((2, 3), remap=True, library=lib).start()
    made.join()
    assert made.made == (0, 1) and retained(lib)[len(before) :] == [40, 41]


def test_a_driver_that_fails_or_is_absent_is_recorded_not_raised(driver, tmp_path):
    failing = cuda_context.DriverContexts((0,), library=driver(fail_init=True)).start()
    failing.join()
    assert (failing.made, failing.failure) == ((), "cuInit returned CUresult 100")
    absent = cuda_context.DriverContexts((0,), library=str(tmp_path / "libnone.so")).start()
    absent.join()
    assert absent.made == () and "libnone.so" in absent.failure


def test_without_cuda_devices_no_thread_starts():
    made = cuda_context.start(["cpu", "cpu"])
    made.join()
    assert made._thread.ident is None and made.made == ()


def test_train_and_bench_start_it_after_the_cache_and_before_torch():
    code = """
import sys
from dflash import bytecode, cli
order = []
cli.bytecode.start = lambda: order.append("bytecode") or bytecode.Start("off")
def probe(devices, remap):
    print(order, "torch" in sys.modules, sorted(set(devices)), remap)
    raise SystemExit(7)
cli.cuda_context.start = probe
sys.exit(cli.main(sys.argv[1:]))
"""
    for argv in (["train"], ["bench"]):
        out = subprocess.run(
            [sys.executable, "-c", code, *argv, "--preset", "gpu-default"], capture_output=True, text=True
        )
        assert (out.returncode, out.stdout) == (7, "['bytecode'] False ['cuda:0'] False\n"), out.stderr


@pytest.mark.cuda
def test_torch_takes_the_context_the_driver_made():
    # A process of its own: this one's CUDA may already be in use.
    code = """
import ctypes
from dflash import cuda_context
made = cuda_context.start(["cuda:0"])
made.join(60)
import torch
torch.ones(1, device="cuda:0").add_(1)
cuda, primary, current = ctypes.CDLL("libcuda.so.1"), ctypes.c_void_p(), ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), 0) == 0
assert cuda.cuCtxGetCurrent(ctypes.byref(current)) == 0
print(made.made, made.failure == "", primary.value == current.value)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout == "(0,) True True\n", out.stderr
