"""A fix must never deadlock a program by itself: global-lock beside a compile that waits on its own
pool threads (pytorch#168042's backend runs compile_fx in 50 workers); and a hang whose wait cycle
runs through a fix's lock is said to be the fix's, never the program's own locks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.runtime import fixes
from harness.runtime.fixes import FixSet
from harness.trial import blocking, hangs
from harness.trial.hangs import Frame, ThreadStack
from tests.test_fixes import run_thread

ROOT = Path(__file__).resolve().parents[1]
JOIN_S = 30.0


@pytest.fixture
def fs() -> FixSet:
    """The global-lock fix, as a program's compiled calls take it."""
    return FixSet.from_names(["global-lock"])


def test_a_locked_call_waits_on_pool_workers_that_take_the_lock(fs):
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
    assert not fixes.GLOBAL_LOCK.locked()


def test_other_threads_still_wait_for_the_holder_and_its_helpers(fs):
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


def test_a_helper_takes_the_global_lock_again_once_its_holders_call_ended(fs):
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


def test_a_helpers_own_threads_help_it(fs):

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


@pytest.mark.parametrize("fix", ["global-lock", "thread-local-stance", "phase-lock"])
def test_a_call_that_ends_on_another_thread_releases_its_lock(fix):
    """A generator suspended inside a guarded call and closed on another thread (a stream whose
    consumer went away): the call ends there, and its lock with it."""
    fs = FixSet.from_names([fix])

    def stream():
        with fs.around_call():
            yield 1
            yield 2

    gen = stream()
    assert next(gen) == 1
    assert run_thread("other-thread", gen.close) == (None, None)  # no error on the closing thread
    go, inside = threading.Event(), threading.Event()

    def probe():
        assert go.wait(JOIN_S)
        with fs.around_call():
            inside.set()

    # Started outside any call (one started inside would be the call's helper and get in).
    other = threading.Thread(target=probe, name="probe-call")
    other.start()
    with fs.around_call():  # this thread takes the lock anew, not as a call nested in the closed one
        go.set()
        assert not inside.wait(0.3)
    other.join(JOIN_S)
    assert inside.is_set() and not other.is_alive()  # and another thread gets in after it


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


# -- a HANG whose wait cycle runs through a fix's lock (trial.blocking) ---------------------------

FIXTURE = ROOT / "tests" / "fixtures" / "hangs" / "global_lock_compile_fx_pool.pyspy.json"
"""py-spy --native of pt168042_compile_fx_threads.py under `stress --fix global-lock` before the
lock had scopes (torch 2.13.0+cpu): MainThread and 3 of the 50 pool workers, plus tqdm's monitor."""

LIB = "/usr/lib/python3.11"
SITE = "/v/lib/python3.11/site-packages"
LOCK_WAIT = (Frame(name="lock_PyThread_acquire_lock", filename="/usr/lib/libpython3.11.so.1.0"),)
POOL_BOTTOM = (
    Frame(name="_worker", filename=f"{LIB}/concurrent/futures/thread.py", line=83),
    Frame(name="Thread.run", filename=f"{LIB}/threading.py", line=982),
    Frame(name="_hook_threads.<locals>.bootstrap_inner", filename="/repo/harness/inject.py", line=66),
)
FIX_ENTRY = (
    Frame(name="GlobalLock.enter", filename="/repo/harness/runtime/fixes.py", line=91),
    Frame(name="FixSet.around_call", filename="/repo/harness/runtime/fixes.py", line=834),
    Frame(name="Guard.call", filename="/repo/harness/runtime/guard.py", line=286),
    Frame(name="_guard_method.<locals>.method", filename="/repo/harness/inject.py", line=130),
    Frame(name="Tracer.trace", filename=f"{SITE}/torch/fx/_symbolic_trace.py", line=800),
)


def stack(name, *frames):
    return ThreadStack(name=name, thread_id=name, status="idle", frames=tuple(frames))


def waiter(name):
    return stack(name, *LOCK_WAIT, *FIX_ENTRY, Frame(name="export", filename="/app/serve.py", line=12), *POOL_BOTTOM)


def test_the_fix_lock_cycle_of_a_real_dump_is_the_fixs_deadlock():
    threads = hangs.read_pyspy_json(FIXTURE)
    kind = blocking.classify(threads)
    assert kind.kind == blocking.FIX_LOCK_CYCLE
    text = kind.text()
    assert text.startswith("the fix deadlocks this program"), text
    assert "program's own locks (a lock-order cycle" not in text
    assert (
        "MainThread holds it in a guarded call from test_fn (public/pt168042_compile_fx_threads.py:70) and waits on "
        "a future at custom_inductor_backend.<locals>.<listcomp> (public/pt168042_compile_fx_threads.py:60)"
    ) in text
    assert (
        "3 thread(s) wait for it at GlobalLock.enter (runtime/fixes.py:91), called from "
        "custom_inductor_backend.<locals>.compile_with_no_grad (public/pt168042_compile_fx_threads.py:54): "
        "ThreadPoolExecutor-1_0, ThreadPoolExecutor-1_1, ThreadPoolExecutor-1_2"
    ) in text
    assert blocking.classify(threads, one_dump=True).kind == blocking.FIX_LOCK_CYCLE  # nobody running


def test_a_holder_waiting_on_a_join_inside_a_guarded_call_closes_the_cycle():
    holder = stack(
        "MainThread",
        *LOCK_WAIT,
        Frame(name="Thread._wait_for_tstate_lock", filename=f"{LIB}/threading.py", line=1132),
        Frame(name="Thread.join", filename=f"{LIB}/threading.py", line=1112),
        Frame(name="backend", filename="/app/serve.py", line=30),
        Frame(name="OptimizedModule.__call__", filename=f"{SITE}/torch/_dynamo/eval_frame.py", line=511),
        Frame(name="_call", filename="/repo/harness/inject.py", line=109),
        Frame(name="main", filename="/app/serve.py", line=44),
    )
    kind = blocking.classify((holder, waiter("exporter-0"), waiter("exporter-1")))
    assert kind.kind == blocking.FIX_LOCK_CYCLE
    assert (
        "MainThread holds it in a guarded call from main (app/serve.py:44) and waits on a thread's end" in kind.text()
    )
    assert "2 thread(s) wait for it at GlobalLock.enter" in kind.text() and "called from export (app/serve.py:12)" in (
        kind.text()
    )


def test_fix_lock_waiters_without_a_visible_holder_are_never_the_programs_own_locks():
    # `with guard.call():` in the program's own code leaves no guarded-call frame on the holder.
    holder = stack(
        "MainThread",
        *LOCK_WAIT,
        Frame(name="Event.wait", filename=f"{LIB}/threading.py", line=629),
        Frame(name="main", filename="/app/serve.py", line=44),
    )
    kind = blocking.classify((holder, waiter("exporter-0"), waiter("exporter-1")))
    assert kind.kind == blocking.FIX_LOCK_WAIT
    assert kind.text().startswith("threads wait on the fix's lock, held by a call that does not return")


def test_a_holder_waiting_inside_torch_is_a_torch_wait():
    holder = stack(
        "MainThread",
        Frame(name="wait", filename=f"{SITE}/torch/_inductor/async_compile.py", line=400),
        Frame(name="_call", filename="/repo/harness/inject.py", line=109),
        Frame(name="main", filename="/app/serve.py", line=44),
    )
    assert blocking.classify((holder, waiter("exporter-0"))).kind == blocking.TORCH_WAIT


def test_phase_locks_condition_wait_is_the_fixs_lock():
    phase = stack(
        "worker-0",
        Frame(name="Condition.wait", filename=f"{LIB}/threading.py", line=327),
        Frame(name="ReadersWriterLock.acquire", filename="/repo/harness/runtime/fixes.py", line=120),
        Frame(name="PhaseLock.enter", filename="/repo/harness/runtime/fixes.py", line=180),
        Frame(name="_call", filename="/repo/harness/inject.py", line=109),
        Frame(name="step", filename="/app/serve.py", line=20),
    )
    (b,) = [blocking.blocked_on(phase)]
    assert (
        b.fix_lock and b.at == "ReadersWriterLock.acquire (runtime/fixes.py:120)" and b.via == "step (app/serve.py:20)"
    )


def test_the_programs_own_deadlock_under_a_fix_stays_its_own():
    # inject's thread bootstrap under every thread is plumbing, not a fix's frame.
    def locker(name, fn):
        return stack(name, *LOCK_WAIT, Frame(name=fn, filename="/app/locks.py", line=9), *POOL_BOTTOM[1:])

    idle = stack("pool-idle", *LOCK_WAIT, Frame(name="Queue.get", filename=f"{LIB}/queue.py", line=171), *POOL_BOTTOM)
    kind = blocking.classify((locker("locker-0", "take_a_then_b"), locker("locker-1", "take_b_then_a"), idle))
    assert kind.kind == blocking.OWN_LOCK_CYCLE
    assert [b.thread for b in kind.blocked] == ["locker-0", "locker-1"]  # the idle pool worker is no party
