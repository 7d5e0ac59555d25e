"""Signatures separate what differs and group what is the same.

Real outputs live in tests/fixtures/tracebacks/<family>/<n>.txt (see its README): one folder is
one key, different folders are different keys. The smaller tests pin the rules themselves.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import replace
from pathlib import Path

import pytest

from harness.trial.frames import module_of
from harness.trial.hangs import parse_pyspy_json
from harness.trial.messages import normalise_message
from harness.trial.signature import (
    SIGNATURE_VERSION,
    crash_signature,
    exception_signature,
    hang_signature,
    thread_role,
    wrong_result_signature,
)
from harness.trial.tracebacks import _run_together, first_failure, parse_tracebacks, primary_traceback

FIXTURES = Path(__file__).parent / "fixtures" / "tracebacks"


def _samples(family: Path) -> list[Path]:
    """Outputs (`<n>.txt`) and py-spy dumps of hangs (`<n>.pyspy.json`)."""
    return sorted([*family.glob("*.txt"), *family.glob("*.pyspy.json")])


FAMILIES = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and _samples(p))


def _key(path: Path) -> str:
    if path.name.endswith(".pyspy.json"):
        return hang_signature(parse_pyspy_json(json.loads(path.read_text()))).key
    sig = crash_signature(path.read_text(errors="replace"))
    assert sig is not None, f"{path}: no signature"
    return sig.key


@pytest.mark.parametrize("family", FAMILIES, ids=lambda p: p.name)
def test_fixture_family_has_one_key(family):
    keys = {f.name: _key(f) for f in _samples(family)}
    assert len(set(keys.values())) == 1, keys


def test_fixture_families_have_distinct_keys():
    assert len(FAMILIES) >= 3
    keys = {family.name: _key(_samples(family)[0]) for family in FAMILIES}
    assert len(set(keys.values())) == len(keys), keys


@pytest.mark.parametrize(
    "family, summary",
    [
        (
            "r4_eager_module_nameerror",
            "fx-module-not-submodule (NameError in eager at torch.fx._symbolic_trace:path_of_module",
        ),
        (
            "f2_fx_trace_of_compiled_fn",
            "fx-trace-of-dynamo-fn (RuntimeError in caller at "
            "torch._dynamo.eval_frame:compile_wrapper < "
            "torch_f2_fx_tracing:call_compiled)",
        ),
        ("r5_reset_segfault", "Segmentation fault at torch._dynamo.eval_frame:compile_wrapper"),
        (
            "gpu_f1_forward",
            "AssertionError in repro-worker at torch._inductor.cudagraph_trees:get_obj"
            " < torch._inductor.cudagraph_trees:get_container < "
            "torch._inductor.cudagraph_trees:cudagraphify (empty message)",
        ),
        (
            "gpu_f1c_mempool_recording",
            "cudagraph-mempool-already-recording (RuntimeError in "
            "repro-train at torch._inductor.cudagraph_trees:"
            "_use_cuda_memory_pool_manager",
        ),
        (
            "gpu_f1c_cublas_in_capture",
            "CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)` (torch.AcceleratorError",
        ),
        (
            "gpu_capture_not_permitted",
            "operation not permitted when stream is capturing ("
            "torch.AcceleratorError in repro-worker at "
            "torch.cuda:synchronize",
        ),
        ("gpu_f9_checkpoint", "cudagraph-input-deallocated (RuntimeError in ? at torch:_check_with"),
        (
            "gpu_f11_legacy_ptr",
            "AssertionError in ? at torch._inductor.compile_fx:run < "
            "torch._inductor.utils:run < torch._inductor.compile_fx:run "
            "(empty message)",
        ),
        ("gpu_segv_during_gc", "Segmentation fault: during garbage collection"),
    ],
)
def test_fixture_summaries_read_well(family, summary):
    sig = crash_signature((FIXTURES / family / "1.txt").read_text())
    assert summary in sig.summary
    assert str(sig) == f"{sig.key} {sig.summary}"
    assert sig.version == SIGNATURE_VERSION


def test_compile_lock_hang_fixture_shows_the_blocked_compile():
    data = json.loads((FIXTURES / "hang_compile_lock_held" / "1.pyspy.json").read_text())
    sig = hang_signature(parse_pyspy_json(data))
    assert "compiler@torch._dynamo.convert_frame:__call__" in sig.frames
    assert "lock-holder@torch_compile_lock_hang:hold_compile_lock" in sig.frames


def test_r4_fixture_role_comes_from_excepthook_header():
    tb = parse_tracebacks((FIXTURES / "r4_eager_module_nameerror" / "1.txt").read_text())[0]
    assert tb.thread == "eager-0" and tb.exc_type == "NameError"
    assert tb.frames[0].name == "path_of_module"


def _real(family: str, n: int = 1) -> str:
    return (FIXTURES / family / f"{n}.txt").read_text()


def test_real_f1_from_forward_and_from_backward_are_two_signatures():
    # The H200 outputs of r01 (fresh thread, forward) and r02 (backward on the autograd thread):
    # same empty AssertionError, same innermost frames; only the way into torch differs.
    fwd = [crash_signature(_real("gpu_f1_forward", n)) for n in (1, 2, 3)]
    bwd = [crash_signature(_real("gpu_f1_backward", n)) for n in (1, 2)]
    for sig in fwd + bwd:
        assert (sig.kind, sig.exc_type, sig.message) == ("exception", "AssertionError", "")
        assert sig.frames == fwd[0].frames and sig.frames[0].endswith("cudagraph_trees:get_obj")
    assert {s.key for s in fwd} != {s.key for s in bwd} and len({s.key for s in fwd + bwd}) == 2
    assert "entry=torch._dynamo.eval_frame:compile_wrapper" in fwd[0].keyed
    assert "entry=torch._tensor:backward" in bwd[0].keyed
    # The entry frame alone separates them: same thread name on both sides, keys still differ.
    tb_f = parse_tracebacks(_real("gpu_f1_forward"))[0]
    tb_b = parse_tracebacks(_real("gpu_f1_backward"))[0]
    same_f, same_b = (exception_signature(replace(tb, thread="t-0")) for tb in (tb_f, tb_b))
    assert same_f.role == same_b.role and same_f.key != same_b.key


def test_real_known_messages_reached_by_different_paths_are_one_signature():
    # beginAllocateToPool: from the forward's recording (r04_iso, header-less r04_b) and from the
    # backward's warm-up (second traceback of the r04 run in gpu_f1c_weakrefs_assert).
    fwd = parse_tracebacks(_real("gpu_f1c_mempool_recording"))[0]
    bwd = parse_tracebacks(_real("gpu_f1c_weakrefs_assert"))[1]
    assert "beginAllocateToPool" in fwd.message and "beginAllocateToPool" in bwd.message
    a, b = exception_signature(fwd), exception_signature(bwd)
    assert a.frames != b.frames and a.role != b.role
    assert a.key == b.key and a.key.startswith("cudagraph-mempool-already-recording-")
    # Overwritten outputs: one real run hit it (inside cudagraph_trees' own input logging, in a
    # backward); the same message on the real forward path of r01 gives the same key.
    over = parse_tracebacks(_real("gpu_cudagraph_overwritten"))[0]
    moved = replace(parse_tracebacks(_real("gpu_f1_forward"))[0], exc_type=over.exc_type, message=over.message)
    c, d = exception_signature(over), exception_signature(moved)
    assert c.frames[0] == "torch._inductor.cudagraph_trees:format_item"
    assert (
        c.frames != d.frames
        and c.key == d.key == crash_signature(_real("gpu_cudagraph_overwritten")).key
        and c.key.startswith("cudagraphs-output-overwritten-")
    )


def test_bare_exception_line_does_not_swallow_the_next_output_line():
    # r02 prints `AssertionError` then `REPRODUCED: ...`; r12 `AssertionError` then `failed steps`.
    assert crash_signature(_real("gpu_f1_backward")).message == ""
    assert crash_signature(_real("gpu_f11_legacy_ptr", 2)).message == ""
    bare = _traceback(FORWARD, "AssertionError") + "failed steps: 39/80\n"
    assert crash_signature(bare, rc=1).message == ""
    told = _traceback(FORWARD, "RuntimeError: boom") + "REPRODUCED: RuntimeError: boom\n"
    assert crash_signature(told, rc=1).message == "boom"


def test_a_header_names_only_the_traceback_after_it():
    # r04: thread repro-train-1's report, then the main thread prints another thread's error.
    tbs = parse_tracebacks(_real("gpu_f1c_weakrefs_assert"))
    assert [(t.thread, t.short_type) for t in tbs] == [("repro-train-1", "AssertionError"), (None, "RuntimeError")]
    chained = (
        "=== thread w-0 failed: RuntimeError: b ===\n"
        + _traceback(FORWARD, "KeyError: 'a'")
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + _traceback(BACKWARD, "RuntimeError: b")
    )
    tbs = parse_tracebacks(chained)
    assert len(tbs) == 1 and tbs[0].thread == "w-0" and tbs[0].chain[0].thread == "w-0"
    grouped = (
        "=== thread w-1 failed: ExceptionGroup: 2 threads failed ===\n"
        + _exception_group_text()
        + "done\n"
        + _traceback(BACKWARD, "ValueError: later")
    )
    assert [(t.thread, t.short_type) for t in parse_tracebacks(grouped)] == [
        ("w-1", "ExceptionGroup"),
        ("w-1", "KeyError"),
        ("w-1", "ValueError"),
        (None, "ValueError"),
    ]


def test_mixed_runs_take_the_first_failure_and_the_chain_cause():
    # r01 with a TLS fix: 3 threads fail 3 ways; the first printed (first to fail) decides.
    tbs = parse_tracebacks(_real("gpu_capture_not_permitted"))
    assert [t.short_type for t in tbs] == ["AcceleratorError", "RuntimeError", "AssertionError"]
    assert crash_signature(_real("gpu_capture_not_permitted")).kind == "cuda"
    # r04 + global lock: cuBLAS handle created inside a capture, then the capture fails.
    tb = parse_tracebacks(_real("gpu_f1c_cublas_in_capture"))[0]
    assert "previous error during capture" in tb.message
    assert crash_signature(_real("gpu_f1c_cublas_in_capture")).message.startswith("CUBLAS_STATUS_NOT_INITIALIZED")


def test_segfault_while_garbage_collecting_is_one_signature_wherever_collection_started():
    # v4: 5 real GC segfaults (r01 + 4 H200 campaign trainer trials) started collecting in 5
    # different frames; without the GC marker the same text keys on its frame, as before.
    texts = [_real("gpu_segv_during_gc", n) for n in range(1, 6)]
    assert all("  Garbage-collecting\n" in t for t in texts)
    sigs = [crash_signature(t) for t in texts]
    assert {s.key for s in sigs} == {sigs[0].key} and sigs[0].frames == ()
    plain = crash_signature(texts[0].replace("  Garbage-collecting\n", ""))
    assert plain.frames == ("torch._dynamo.convert_frame:_compile",) and plain.message == ""
    assert plain.key != sigs[0].key


@pytest.mark.parametrize(
    "folder, first, resource",
    [
        ("gpu_oom_cublas_then_segv_gc", "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
        ("gpu_oom_then_segv_gc", "torch.OutOfMemoryError in dflash-train", True),
        # The unraisable `Exception ignored in tp_clear` TypeError printed before it is not the cause.
        ("gpu_mix_order_then_segv_gc", "RuntimeError in dflash-train at torch.utils._device:__torch_function__", False),
    ],
)
def test_a_native_crash_after_a_threads_exception_is_keyed_by_that_first_failure(folder, first, resource):
    # v5: three of the H200 campaign's GC segfaults came after the trainer's threads had died.
    from harness.trial.outcome import RESOURCE_PATTERN

    sig = crash_signature(_real(folder), rc=-11)
    assert sig.summary.startswith(first)
    assert sig.summary.endswith("; then Segmentation fault: during garbage collection")
    assert (RESOURCE_PATTERN.search(sig.summary) is not None) is resource
    assert "Segmentation" not in "".join(sig.keyed)


def test_an_exception_ignored_by_a_finaliser_is_not_a_failure():
    text = (
        "Exception ignored in: <function Foo.__del__ at 0x7f>\nTraceback (most recent call last):\n"
        '  File "a.py", line 3, in __del__\nTypeError: boom\n' + _traceback([("b.py", 9, "work")], "ValueError: real")
    )
    tbs = parse_tracebacks(text)
    assert [tb.unraisable for tb in tbs] == [True, False]
    assert primary_traceback(tbs).exc_type == "ValueError"


# ------------------------------------------------------------------------------------- rules


def _exception_group_text() -> str:
    """The traceback Python prints for ExceptionGroup("2 threads failed") of a raised KeyError("k")
    and ValueError("v")."""
    members = []
    for exc in (KeyError("k"), ValueError("v")):
        try:
            raise exc
        except Exception as caught:
            members.append(caught)
    try:
        raise ExceptionGroup("2 threads failed", members)
    except ExceptionGroup as group:
        return "".join(traceback.format_exception(group))


def _traceback(frames: list[tuple[str, int, str]], exc: str, header: str = "") -> str:
    lines = [header] if header else []
    lines.append("Traceback (most recent call last):")
    for filename, line, func in frames:
        lines += [f'  File "{filename}", line {line}, in {func}', "    some_code()", "    ^^^^"]
    return "\n".join(lines + [exc, ""])


SITE = "/venv/lib/python3.12/site-packages/torch"
CGT = [
    (f"{SITE}/_inductor/cudagraph_trees.py", 380, "get_manager"),
    (f"{SITE}/_inductor/cudagraph_trees.py", 360, "get_container"),
    (f"{SITE}/_inductor/cudagraph_trees.py", 330, "get_obj"),
]
FORWARD = [
    ("/repo/dflash/train_worker.py", 80, "step"),
    (f"{SITE}/_dynamo/eval_frame.py", 1166, "compile_wrapper"),
    (f"{SITE}/_inductor/output_code.py", 600, "__call__"),
] + CGT
BACKWARD = [
    ("/repo/dflash/train_worker.py", 90, "step"),
    (f"{SITE}/_tensor.py", 648, "backward"),
    (f"{SITE}/autograd/__init__.py", 353, "backward"),
    (f"{SITE}/autograd/graph.py", 824, "_engine_run_backward"),
] + CGT


def test_same_assertion_from_forward_and_backward_are_two_signatures():
    # F1 (pytorch/pytorch#123177): empty AssertionError, identical innermost frames.
    header = "=== thread dflash-train-1 failed: AssertionError:  ==="
    fwd = crash_signature(_traceback(FORWARD, "AssertionError", header), rc=1)
    bwd = crash_signature(_traceback(BACKWARD, "AssertionError", header), rc=1)
    assert fwd.frames == bwd.frames  # top 3 alike ...
    assert fwd.key != bwd.key  # ... but entered torch differently
    assert fwd.role == bwd.role == "dflash-train"


def test_same_error_via_other_line_numbers_addresses_and_replica_is_one_signature():
    a = _traceback(
        FORWARD, "ValueError: bad ptr 0x7f00aa at step 12", "=== thread dflash-train-0 failed: ValueError: x ==="
    )
    moved = [(f, line + 7, fn) for f, line, fn in FORWARD]
    b = _traceback(
        moved, "ValueError: bad ptr 0x7f11bb at step 99", "=== thread dflash-train-3 failed: ValueError: x ==="
    )
    assert crash_signature(a, rc=1).key == crash_signature(b, rc=1).key


def test_trainer_report_with_a_multiline_message_keeps_the_thread():
    header = "=== thread dflash-target-2 failed: BackendCompilerFailed: backend='inductor' raised:"
    text = header + "\nKeyError: 'x' ===\n" + _traceback(FORWARD, "RuntimeError: compile failed")
    assert crash_signature(text, rc=1).role == "dflash-target"


def test_thread_role_is_part_of_an_exception_signature():
    a = _traceback(FORWARD, "ValueError: x", "Exception in thread dflash-train-0:")
    b = _traceback(FORWARD, "ValueError: x", "Exception in thread dflash-target-0:")
    assert crash_signature(a, rc=1).key != crash_signature(b, rc=1).key


def test_known_message_groups_different_call_paths():
    msg = (
        "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten "
        'by a subsequent run. Stack trace: File "/a/b.py", line 3'
    )
    a = crash_signature(_traceback(FORWARD, msg), rc=1)
    b = crash_signature(_traceback(BACKWARD[:3], msg), rc=1)
    assert a.key == b.key and a.key.startswith("cudagraphs-output-overwritten-")


def test_wrapped_current_patcher_errors_are_one_signature():
    bare = _traceback(FORWARD, "AssertionError: CURRENT_PATCHER is None in finally block")
    wrapped = _traceback(
        BACKWARD,
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor'"
        " raised:\nAssertionError: CURRENT_PATCHER is None in finally block",
    )
    assert crash_signature(bare, rc=1).key == crash_signature(wrapped, rc=1).key


def test_cuda_errors_are_keyed_by_the_error_string():
    a = crash_signature(
        _traceback(
            FORWARD,
            "torch.AcceleratorError: CUDA error: operation not "
            "permitted when stream is capturing\nCUDA kernel errors ...",
        )
    )
    b = crash_signature(
        _traceback(BACKWARD, "RuntimeError: CUDA error: operation not permitted when stream is capturing")
    )
    c = crash_signature(
        _traceback(FORWARD, "RuntimeError: CUDA error: operation failed due to a previous error during capture")
    )
    assert a.kind == "cuda" and a.key == b.key != c.key
    assert a.summary.startswith("operation not permitted when stream is capturing")


def test_secondary_stop_exceptions_do_not_hide_the_cause():
    stop = _traceback(
        FORWARD, "dflash.errors.StageStopped: stopping", "=== thread dflash-target-0 failed: StageStopped: stopping ==="
    )
    cause = _traceback(BACKWARD, "KeyError: 'x'", "=== thread dflash-train-0 failed: KeyError: 'x' ===")
    sig = crash_signature(stop + cause, rc=1)
    assert sig.exc_type == "KeyError" and sig.role == "dflash-train"


def test_exception_group_members_are_parsed_and_the_first_is_the_cause():
    text = _exception_group_text()
    tbs = parse_tracebacks(text)
    assert [t.exc_type for t in tbs] == ["ExceptionGroup", "KeyError", "ValueError"]
    assert crash_signature(text, rc=1).exc_type == "KeyError"


def test_chained_tracebacks_fold_into_the_last():
    text = (
        _traceback(FORWARD, "KeyError: 'a'")
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + _traceback(BACKWARD, "RuntimeError: wrapped")
    )
    tbs = parse_tracebacks(text)
    assert len(tbs) == 1 and tbs[0].exc_type == "RuntimeError"
    assert [t.exc_type for t in tbs[0].chain] == ["KeyError"]


def test_cpp_terminate_is_keyed_by_what():
    text = (
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  invalid device ordinal 3\nFatal Python error: Aborted\n\n"
        "Current thread 0x00007f (most recent call first):\n"
        '  File "/repo/dflash/pipeline.py", line 5 in run\n'
    )
    sig = crash_signature(text, rc=-6)
    assert sig.kind == "fatal" and sig.exc_type == "c10::Error"
    assert sig.message == "invalid device ordinal <int>"
    assert sig.frames == ("dflash.pipeline:run",)


def test_terminate_without_an_exception_is_its_own_message():
    # A thread ended by CPython while it takes the GIL during finalization (repro r26): with and
    # without faulthandler's report after it, one key; the thread that was current stays in it.
    bare = "joined\nterminate called without an active exception\n"
    reported = (
        "terminate called without an active exception\nFatal Python error: Aborted\n\n"
        "Current thread 0x00007f (most recent call first):\n"
        '  File "/repo/dflash/pipeline.py", line 5 in run\n'
    )
    a, b = crash_signature(bare, rc=-6), crash_signature(reported, rc=-6)
    assert a.kind == b.kind == "fatal" and a.exc_type == b.exc_type == "std::terminate"
    assert a.message == b.message == "terminate called without an active exception"
    assert a.frames == () and b.frames == ("dflash.pipeline:run",)
    assert crash_signature(bare + "REPRODUCED: x\n", rc=1).key == a.key


def test_killed_without_report_is_keyed_by_signal():
    assert crash_signature("partial output\n", rc=-9).key.startswith("SIGKILL-")


def test_wrong_result_signature_normalises_numbers():
    a = wrong_result_signature("x\nWRONG_RESULT: loss nan at step 12\n")
    b = wrong_result_signature("WRONG_RESULT: loss nan at step 40\n")
    assert a.key == b.key and a.message == "loss nan at step <int>"


def _pyspy_thread(name: str, tid: int, frames: list[tuple[str, str, int]], active: bool = False) -> dict:
    """One thread of `py-spy dump --json`: frames (function, file, line), innermost first."""
    return {
        "thread_name": name,
        "thread_id": tid,
        "os_thread_id": 10 + tid,
        "active": active,
        "frames": [{"name": f, "filename": file, "line": line} for f, file, line in frames],
    }


_WAIT = ("Condition.wait", "/usr/lib/python3.12/threading.py", 331)
_GET = ("Channel.get", "/repo/dflash/channel.py", 40)
PYSPY = [
    _pyspy_thread(
        "dflash-train-0",
        1,
        [
            ("PyThread_acquire_lock_timed", "libpython3.12.so", 0),
            _WAIT,
            _GET,
            ("run", "/repo/dflash/train_worker.py", 9),
        ],
    ),
    _pyspy_thread("dflash-train-1", 2, [_WAIT, _GET]),
    _pyspy_thread("harness-watchdog", 3, [("loop", "/repo/harness/faults/scheduler.py", 1)], active=True),
]


def test_g2_hang_names_the_autograd_device_thread_and_drops_helper_threads():
    # H200 trainer hang (G2, docs/log/2026-11-29-dflash-trainer-on-h200.md): py-spy gives the
    # autograd device thread no name; its C++ entry frame identifies it. tqdm's monitor and
    # Inductor's reader are left out.
    data = json.loads((FIXTURES / "gpu_hang_flex_backward_compile" / "1.pyspy.json").read_text())
    threads = parse_pyspy_json(data)
    assert {t.name for t in threads} >= {"?", "tqdm_monitor", "InductorSubproc"}
    sig = hang_signature(threads)
    assert "autograd-device@torch._inductor.compile_fx:compile_fx_backward" in sig.frames
    assert not any(f.startswith(("?", "tqdm_monitor", "InductorSubproc")) for f in sig.frames)
    assert "dflash-train@torch.autograd.graph:_engine_run_backward" in sig.frames


def test_hang_signature_is_the_set_of_role_and_blocking_frame():
    sig = hang_signature(parse_pyspy_json(PYSPY))
    assert sig.frames == ("dflash-train@dflash.channel:get",)
    reordered = hang_signature(parse_pyspy_json(list(reversed(json.loads(json.dumps(PYSPY))))))
    assert reordered.key == sig.key and sig.key.startswith("hang-")


@pytest.mark.parametrize(
    "raw, expected",
    [
        (
            "name '__compiled_fn_243_aaae9c68_f4ef_490b_ab8c_3b2c1d0e9f8a' is not defined",
            "name '__compiled_fn_<N>' is not defined",
        ),
        ("tensor at 0x7f3a2b1c freed", "tensor at <hex> freed"),
        ("run 123e4567-e89b-12d3-a456-426614174000 done", "run <uuid> done"),
        ("cache /tmp/torchinductor_root/ab/cd.py missing", "cache <path> missing"),
        ("lr 0.0003 step 17 of [4, 8]", "lr <float> step <int> of [<int>, <int>]"),
        ("key 3f9a1c2b7d4e5f60 stale", "key <hash> stale"),
        ("first\n\nsecond\nthird", "first | second"),
        (
            "tuple index out of range\n=== threads still alive after the shutdown deadline: dflash-train-1 ===",
            "tuple index out of range",
        ),
        ("float32 and int64 differ", "float32 and int64 differ"),
    ],
)
def test_normalise_message(raw, expected):
    assert normalise_message(raw) == expected


@pytest.mark.parametrize(
    "name, role",
    [
        ("dflash-train-1", "dflash-train"),
        ("Dummy-5", "Dummy"),
        ("MainThread", "MainThread"),
        ("Thread-3 (worker)", "Thread (worker)"),
        ("ThreadPoolExecutor-0_1", "ThreadPoolExecutor"),
        ("Thread 0x00007f52", "?"),
        (None, "?"),
    ],
)
def test_thread_role(name, role):
    assert thread_role(name) == role


@pytest.mark.parametrize(
    "filename, module",
    [
        ("/x/.venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", "torch._dynamo.eval_frame"),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/concurrent/futures/thread.py", "concurrent.futures.thread"),
        ("/gpu/host/checkout/dflash/pipeline.py", "dflash.pipeline"),
        ("/work/main/tests/scripts/crash.py", "crash"),
        ("/x/site-packages/torch/__init__.py", "torch"),
        ("/work/main/.cache/inductor/cn/ccnww2fos7cyg4gsgokesqzcke4xsbszdss7vnohfqbuve5epyhc.py", "<inductor-output>"),
        ("/tmp/torchinductor_root/rz/crz7x46nxzppytxuo3bsoazzzgjpzmfffwzocvaalu47iaaonyy5.py", "<inductor-output>"),
        ("/x/dflash/cache_manager.py", "dflash.cache_manager"),
    ],
)
def test_module_of_is_independent_of_checkout_location(filename, module):
    assert module_of(filename) == module


def test_one_compiler_bug_in_two_compiled_graphs_is_one_signature():
    # The mix-order failure of results/gpu-shape2 with dynamic=true ran in Inductor output module
    # crz7x..., the same failure with automatic dynamic shapes in ccnww...: one key (v6).
    text = (FIXTURES / "gpu_mix_order_shape" / "1.txt").read_text()
    other = text.replace(
        "ccnww2fos7cyg4gsgokesqzcke4xsbszdss7vnohfqbuve5epyhc", "crz7x46nxzppytxuo3bsoazzzgjpzmfffwzocvaalu47iaaonyy5"
    )
    assert other != text
    first, second = crash_signature(text), crash_signature(other)
    assert first.key == second.key and "<inductor-output>:call" in first.summary


def test_main_thread_traceback_gets_main_role():
    text = _traceback([("/w/s.py", 3, "<module>"), ("/w/s.py", 1, "f")], "KeyError: 1")
    sig = crash_signature(text, rc=1)
    assert sig.role == "MainThread" and re.match(r"^KeyError-[0-9a-f]{10}$", sig.key)


# ------------------------------------------------- programs written outside this project (v7)

FORMS = Path(__file__).parent / "fixtures" / "signature_forms"
F2_KEY = crash_signature((FIXTURES / "f2_fx_trace_of_compiled_fn" / "1.txt").read_text()).key


@pytest.mark.parametrize("folder", sorted(p.name for p in FORMS.iterdir() if p.is_dir()))
def test_signature_forms_fixture_folder_has_one_key(folder):
    keys = {f.name: crash_signature(f.read_text(), rc=1).key for f in sorted((FORMS / folder).glob("*.txt"))}
    assert len(keys) >= 1 and len(set(keys.values())) == 1, keys


def test_excepthooks_printing_at_once_are_read_apart():
    # Three request threads failed together; their hooks' lines interleaved, down to pieces of
    # lines (`Exception in thread Exception in thread caller-0:`). One key had read the role as
    # `Exception in thread caller`.
    for n in (4, 5):
        text = _real("f2_fx_trace_of_compiled_fn", n)
        assert "Exception in thread" in text and text.count("Traceback (most recent call last):") == 3
        tbs = parse_tracebacks(text)
        assert sorted(t.thread for t in tbs) == ["caller-0", "caller-1", "caller-2"]
        assert all([f.name for f in t.frames] == ["compile_wrapper", "run", "_bootstrap_inner"] for t in tbs)
        sig = crash_signature(text, rc=1)
        assert sig.key == F2_KEY and sig.role == "caller"
        assert sig.frames == ("torch._dynamo.eval_frame:compile_wrapper", "f2a:run")


@pytest.mark.parametrize(
    "header, thread",
    [
        ("Exception in thread caller-0:", "caller-0"),
        ("Exception in thread caller-0", "caller-0"),  # a user's print, no colon
        ("ERROR:root:Exception in thread caller-0", "caller-0"),  # logging.exception
        ("2026-12-02 03:10:00,123 ERROR Exception in thread caller-0: step 3", "caller-0"),
        ("Exception in thread Thread-3 (serve):", "Thread-3 (serve)"),  # 3.10+: a nameless thread's target
        ("Exception in thread Exception in thread caller-1:", "caller-1"),
        ("2026-12-02 03:10:00 ERROR scorer: compiled call failed in thread scorer-0", "scorer-0"),
        ("INFO:root:warming up the pool in thread pool", None),  # not an error's log line
    ],
)
def test_headers_as_users_and_loggers_print_them(header, thread):
    tb = parse_tracebacks(_traceback(FORWARD, "ValueError: x", header))[0]
    assert tb.thread == thread


def test_a_traceback_behind_a_log_prefix_then_a_json_line_is_the_exception():
    # A program caught a thread's F1c error, logged `traceback.format_exc()` after its prefix and
    # printed a JSON line: the signature had been `exit 1: Data Pointer: <int>, history:`. The
    # traceback and its debug text are the real H200 r04 output's (gpu-repros r04:raw@-/1).
    real = (FORMS / "gpu_f1c_pool_not_tracked" / "1.txt").read_text()
    block = real[real.index("Traceback (most recent call last):") :]
    block = block[: block.index("\n\n") + 1]
    assert "Data Pointer: " in block and block.count("\n") > 60
    json_line = '{"event": "step_failed", "step": 7}\n'
    logged = "[2026-12-02 03:10:00,123] ERROR trainer - worker error: " + block + "\n" + json_line
    bare = block[block.index("RuntimeError: Detected") :] + json_line  # print(f"{type(e).__name__}: {e}")
    expected = crash_signature(real, rc=1).key
    assert expected.startswith("cudagraph-pool-not-tracked-")
    for text in (logged, bare, block + json_line):
        sig = crash_signature(text, rc=1)
        assert sig.kind == "known" and sig.key == expected, sig
    # The same with a real CPU run: F2 logged behind a prefix, JSON last.
    assert crash_signature(_real("f2_fx_trace_of_compiled_fn", 6), rc=1).key == F2_KEY


def test_torchrun_rank_prefix_on_every_line():
    text = "".join(f"[rank0]: {line}\n" for line in _real("r4_eager_module_nameerror").splitlines())
    plain = crash_signature(_real("r4_eager_module_nameerror"), rc=1)
    prefixed = crash_signature(text, rc=1)
    assert prefixed.key == plain.key and prefixed.summary == plain.summary


def test_c10_error_with_cpp_frames_is_one_exception():
    plain, frames = ((FORMS / "c10_error_cpp_frames" / f"{n}.txt").read_text() for n in (1, 2))
    assert "Exception raised from infer_size_impl" in frames and "C++ CapturedTraceback:" in frames
    a, b = crash_signature(plain, rc=1), crash_signature(frames, rc=1)
    assert a.key == b.key and a.role == "loader"
    assert b.message == "shape '[<int>, <int>]' is invalid for input of size <int>"
    assert parse_tracebacks(frames)[0].message == "shape '[3, 5]' is invalid for input of size 8"


def test_a_repro_names_the_thread_of_a_failure_it_caught():
    # r06's main thread prints the caller thread's caught error; the traceback alone starts at the
    # thread's function, so without the report line the role was `?` (results/cpu-quick).
    sig = crash_signature(_real("f2_fx_trace_of_compiled_fn", 9), rc=1)
    assert sig.key == F2_KEY and sig.role == "repro-caller"
    assert sig.frames == ("torch._dynamo.eval_frame:compile_wrapper", "repro.r06_fx_tracing_flag:caller")


@pytest.mark.parametrize(
    "folder, n, frames",
    [
        (
            "f2_fx_trace_of_compiled_fn",
            7,
            (
                "torch._dynamo.eval_frame:compile_wrapper",
                "user_f2_executor_result:<genexpr>",
                "user_f2_executor_result:score_batches",
            ),
        ),
        (
            "r4_eager_module_nameerror",
            4,
            (
                "torch.fx._symbolic_trace:path_of_module",
                "torch.fx._symbolic_trace:call_module",
                "torch.fx._symbolic_trace:module_call_wrapper",
            ),
        ),
    ],
)
def test_future_result_reraise_is_the_pool_workers(folder, n, frames):
    # The main thread's `future.result()` / `pool.map` re-raised a worker's exception: the
    # traceback starts at `<module>`, yet the worker raised it.
    text = _real(folder, n)
    tb = primary_traceback(parse_tracebacks(text))
    assert tb.frames[-1].name == "<module>" and tb.thread == "ThreadPoolExecutor"
    sig = crash_signature(text, rc=1)
    assert sig.role == "ThreadPoolExecutor" and sig.frames == frames
    assert sig.key == crash_signature(_real(folder, 1), rc=1).key


def _kept_and_reraised() -> tuple[str, str]:
    """Real tracebacks of a worker's exception re-raised by the main thread (`raise errors[0]`),
    and of one re-raised in the function that caught it (`raise exc`)."""
    import threading

    errors = []

    def step():
        return {}["missing"]

    def worker():
        try:
            step()
        except KeyError as exc:
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    try:
        raise errors[0]
    except KeyError:
        kept = traceback.format_exc()
    try:
        try:
            step()
        except KeyError as exc:
            raise exc
    except KeyError:
        same = traceback.format_exc()
    return kept, same


def test_a_kept_exception_raised_again_is_from_an_unknown_thread():
    kept, same = _kept_and_reraised()
    tb = parse_tracebacks(kept)[0]
    assert tb.thread is None and [f.name for f in tb.origin_frames] == ["step", "worker"]
    assert crash_signature(kept, rc=1).frames == ("test_signature:step", "test_signature:worker")
    # `raise exc` where it was caught: Python prints that frame twice; no other thread involved.
    tb = parse_tracebacks(same)[0]
    assert tb.origin_frames == tb.frames


def test_a_subprocess_exception_is_keyed_by_the_jobs_exception():
    sig = crash_signature((FORMS / "subproc_exception" / "1.txt").read_text(), rc=1)
    assert sig.message == "An exception occurred in a subprocess: | ZeroDivisionError: division by zero"
    assert sig.role == "compiler" and [
        t.exc_type for t in parse_tracebacks((FORMS / "subproc_exception" / "1.txt").read_text())[0].chain
    ] == ["ZeroDivisionError"]
    other_job = (
        (FORMS / "subproc_exception" / "1.txt")
        .read_text()
        .replace("ZeroDivisionError: division by zero", "KeyError: 'x'")
    )
    assert crash_signature(other_job, rc=1).key != sig.key
    # On a GPU, compile_fx wraps it (`InductorError: SubprocException: ...`) and the job's name is
    # the kernel's; neither run is in the stores, so the real output is re-worded that way.
    wrapped = (
        (FORMS / "subproc_exception" / "1.txt")
        .read_text()
        .replace(
            "torch._inductor.compile_worker.subproc_pool.SubprocException: An exception",
            "torch._inductor.exc.InductorError: SubprocException: An exception",
        )
        .replace("Name=<unknown>", "Name=triton_poi_fused_add_0")
    )
    assert crash_signature(wrapped, rc=1).message == (
        "SubprocException: An exception occurred in a subprocess: | ZeroDivisionError: division by zero"
    )


def test_device_side_assert_in_a_thread_and_at_exit_is_one_signature():
    # No run in the stores hit a device-side assert; the CUDA error of a real H200 output
    # (r01 with a TLS fix) stands in, with torch's text for the assert.
    real = _real("gpu_capture_not_permitted")
    text = real.replace("operation not permitted when stream is capturing", "device-side assert triggered")
    assert text != real
    in_thread = crash_signature(text, rc=1)
    at_exit = crash_signature(
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:94: operator(): block: [0,0,0], thread: [0,0,0] "
        'Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n'
        "terminate called after throwing an instance of 'c10::AcceleratorError'\n"
        "  what():  CUDA error: device-side assert triggered\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\n"
        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:44 "
        "(most recent call first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98\n"
        "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n  <no Python frame>\n",
        rc=-6,
    )
    assert in_thread.kind == at_exit.kind == "cuda" and in_thread.key == at_exit.key
    assert in_thread.message == "device-side assert triggered"


def test_a_known_error_printed_before_a_native_crash_keys_it():
    crash = _real("r5_reset_segfault")
    printed = (
        "request failed: RuntimeError('Detected that you are using FX to symbolically trace a "
        "dynamo-optimized function. This is not supported at the moment.')\n"
    )
    sig = crash_signature(printed + crash, rc=-11)
    assert sig.key == F2_KEY and sig.then == crash_signature(crash, rc=-11).summary


def test_a_traceback_logged_as_a_warning_is_not_the_failure():
    # Inductor's warning with exc_info, each line behind torch's log prefix, then the trainer's
    # real failure (results/gpu-topology-4, launch-bound:single-thread-autograd@-/0).
    prefix = "W1130 22:12:42.758000 1184 torch/_inductor/triton_bundler.py:228] [0/0] "
    warning = "".join(
        prefix + line + "\n"
        for line in (
            "Failed to reload cubin file statically launchable autotuner triton_tem_fused_0",
            "Traceback (most recent call last):",
            '  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/_inductor/triton_bundler.py", line 226, in load_autotuners',
            "    compile_result.reload_cubin_path()",
            "RuntimeError: ('Cubin file saved by TritonBundler not found at %s', '/x/triton_tem_fused_0.cubin')",
        )
    )
    failure = _traceback(FORWARD, "AssertionError", "=== thread dflash-train-1 failed: AssertionError ===")
    tbs = parse_tracebacks(warning + failure)
    assert [t.handled for t in tbs] == [True, False]
    assert crash_signature(warning + failure, rc=1).key == crash_signature(failure, rc=1).key


def test_colour_codes_and_a_start_new_thread_death():
    red = _traceback(FORWARD, "\x1b[1;35mValueError\x1b[0m: \x1b[35mx\x1b[0m", "Exception in thread w-0:")
    assert (
        crash_signature(red, rc=1).key
        == crash_signature(_traceback(FORWARD, "ValueError: x", "Exception in thread w-0:"), rc=1).key
    )
    died = _traceback(BACKWARD, "KeyError: 'k'", "Exception ignored in thread started by: <function w at 0x7f>")
    assert first_failure(parse_tracebacks(died)).exc_type == "KeyError"


def test_a_user_wrapping_a_known_error_shows_where_torch_raised_it():
    cause = _traceback(
        FORWARD[:2],
        "RuntimeError: Detected that you are using FX to symbolically trace "
        "a dynamo-optimized function. This is not supported at the moment.",
        "Exception in thread Thread-2 (serve):",
    )
    wrapped = (
        cause
        + "\nThe above exception was the direct cause of the following exception:\n\n"
        + _traceback(FORWARD[:1], "__main__.StepFailed: step 3: scoring failed")
    )
    sig = crash_signature(wrapped, rc=1)
    assert sig.key == F2_KEY and sig.exc_type == "RuntimeError" and sig.role == "Thread (serve)"
    assert sig.frames == ("torch._dynamo.eval_frame:compile_wrapper", "dflash.train_worker:step")


def test_headers_that_ran_together_name_each_thread_and_keep_each_traceback_apart():
    # Three excepthooks at once: `Exception in thread Exception in thread Exception in thread
    # request-2request-1request-0:`, each hook's `:` on a later line (a real run, fixture 10.txt).
    text = (FIXTURES / "f2_fx_trace_of_compiled_fn" / "10.txt").read_text()
    tbs = parse_tracebacks(text)
    assert [tb.thread for tb in tbs] == ["request-2", "request-1", "request-0"]
    assert all([f.name for f in tb.frames] == ["compile_wrapper", "run", "_bootstrap_inner"] for tb in tbs)
    assert _run_together("caller-0", 2) == ["caller-0"]  # unsplittable: stays one name
