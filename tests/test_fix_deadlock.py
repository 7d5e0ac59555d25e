"""A fix must never deadlock a program by itself: global-lock beside a compile that waits on its own
pool threads (pytorch#168042's backend runs compile_fx in 50 workers)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.runtime import fixes
from harness.runtime.fixes import FixSet

ROOT = Path(__file__).resolve().parents[1]
JOIN_S = 30.0


def test_a_locked_call_waits_on_pool_workers_that_take_the_lock():
    fs = FixSet.from_names(["global-lock"])
    inside, peak, count = [0], [0], threading.Lock()

    def helper(i):
        with fs.around_call():
            with count:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            with count:
                inside[0] -= 1
        return i

    with fs.around_call():  # the holder: a compile whose backend fans out to a pool
        with ThreadPoolExecutor(max_workers=8) as pool:
            got = [f.result(timeout=JOIN_S) for f in [pool.submit(helper, i) for i in range(8)]]
    assert got == list(range(8))
    assert peak == [1]  # helpers still run one at a time
    assert not fixes.GLOBAL_LOCK._is_owned()


def test_other_threads_still_wait_for_the_holder_and_its_helpers():
    fs = FixSet.from_names(["global-lock"])
    helper_in, outsider_in, go = threading.Event(), threading.Event(), threading.Event()

    def helper():
        with fs.around_call():
            helper_in.set()
            assert go.wait(JOIN_S)

    def outsider():
        assert helper_in.wait(JOIN_S)
        with fs.around_call():
            outsider_in.set()

    # Started before the locked call: not a helper of it (a thread started inside one would be).
    out = threading.Thread(target=outsider, name="outsider")
    out.start()
    with fs.around_call():
        with ThreadPoolExecutor(max_workers=1) as pool:
            done = pool.submit(helper)
            assert helper_in.wait(JOIN_S)
            assert not outsider_in.wait(0.2)  # held: the outsider cannot be in
            go.set()
            done.result(timeout=JOIN_S)
        assert not outsider_in.wait(0.2)
    out.join(JOIN_S)
    assert outsider_in.is_set() and not out.is_alive()


def test_a_helper_takes_the_global_lock_again_once_its_holders_call_ended():
    fs = FixSet.from_names(["global-lock"])
    with fs.around_call():
        pool = ThreadPoolExecutor(max_workers=1)  # its worker starts inside the locked call
        pool.submit(lambda: None).result(timeout=JOIN_S)
    held, release, entered = threading.Event(), threading.Event(), threading.Event()

    def other_holder():
        with fs.around_call():
            held.set()
            assert release.wait(JOIN_S)

    def enter_once():
        with fs.around_call():
            entered.set()

    other = threading.Thread(target=other_holder, name="other-holder")
    other.start()
    try:
        assert held.wait(JOIN_S)
        late = pool.submit(enter_once)
        assert not entered.wait(0.2)  # the old helper waits for the new holder like anyone else
    finally:
        release.set()
        other.join(JOIN_S)
    late.result(timeout=JOIN_S)
    assert entered.is_set()
    pool.shutdown()


def test_a_helpers_own_threads_help_it():
    fs = FixSet.from_names(["global-lock"])

    def grandchild():
        with fs.around_call():
            return "deep"

    def child():
        with fs.around_call():
            with ThreadPoolExecutor(max_workers=2) as pool:
                return [f.result(timeout=JOIN_S) for f in [pool.submit(grandchild) for _ in range(2)]]

    with fs.around_call():
        with ThreadPoolExecutor(max_workers=2) as pool:
            got = [f.result(timeout=JOIN_S) for f in [pool.submit(child) for _ in range(2)]]
    assert got == [["deep", "deep"]] * 2


def test_a_backend_tracing_in_pool_threads_under_stress_fix_global_lock():
    # inject guards FX's Tracer.trace: the pool's traces took the lock the compiled call held (HANG).
    program = """
        import copy
        from concurrent.futures import ThreadPoolExecutor
        import torch
        from harness import inject
        inject.install("global-lock")

        def backend(gm, example_inputs):
            with ThreadPoolExecutor(max_workers=4) as pool:
                traced = list(pool.map(lambda _: torch.fx.symbolic_trace(copy.deepcopy(gm)), range(4)))
            return traced[0].forward

        f = torch.compile(lambda x: (x * 2).relu(), backend=backend)
        print(f(torch.ones(3)).tolist())
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True, timeout=240, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[2.0, 2.0, 2.0]"
