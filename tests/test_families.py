"""harness.diagnosis.families: real failure outputs land in the failure mode the catalogue names."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.diagnosis.catalogue import load
from harness.diagnosis.families import DESCRIPTIONS, family
from harness.trial.signature import crash_signature

FIXTURES = Path(__file__).parent / "fixtures" / "tracebacks"


@pytest.mark.parametrize(
    "folder, expected",
    [
        ("gpu_f1_forward", "F1"),
        ("gpu_f1_backward", "F1"),
        ("gpu_f1c_mempool_recording", "F1c"),
        ("gpu_cgt_outputs_differ", "F1c"),
        ("gpu_cudagraph_overwritten", "F1c"),
        ("gpu_f1c_warmup_parent", "F1c"),
        ("gpu_f1c_weakrefs_assert", "F1c"),  # r04, two threads sharing one graph
        ("gpu_f1c_weakrefs_assert_trainer", "F1c"),
        ("gpu_f1c_cublas_in_capture", "G1"),
        ("gpu_mix_order_shape", "mix-order"),
        ("gpu_mix_order_then_segv_gc", "mix-order"),
        ("gpu_capture_not_permitted", "capture"),
        ("gpu_f9_checkpoint", "F9"),
        ("gpu_f11_legacy_ptr", "F11"),  # r12 on the H200 (h200-2026-11-29/run09, run10)
        ("gpu_segv_during_gc", "segv-gc"),
        ("f2_fx_trace_of_compiled_fn", "F2"),
        ("r4_eager_module_nameerror", "R4"),
        ("r5_reset_segfault", "R5"),
        ("r5_reset_fpe", "R5"),
    ],
)
def test_every_file_of_a_fixture_family_maps_to_its_failure_mode(folder, expected):
    for path in sorted((FIXTURES / folder).glob("*.txt")):
        assert family(crash_signature(path.read_text()).summary) == expected, path.name


def test_the_other_faces_of_r5_are_r5():
    # Summaries from results/native-cpu (r16 with reset_code_caches() and with inductor).
    assert family("Segmentation fault at torch._dynamo.guards:invalidate") == "R5"
    # pybind11's double free is its own family: the trainer, which never resets, met it too.
    assert (
        family(
            "std::runtime_error at repro.r16_reset_segfault:f: pybind11_object_dealloc(): Tried to "
            "deallocate unregistered instance!"
        )
        == "pybind-dealloc"
    )
    assert (
        family(
            "std::runtime_error at torch._inductor.remote_cache:get: pybind11_object_dealloc(): Tried to "
            "deallocate unregistered instance!"
        )
        == "pybind-dealloc"
    )
    assert family("Segmentation fault at torch._dynamo.convert_frame:_compile") == "segv"


def test_hang_families_and_the_unknown():
    assert (
        family(
            "hang: MainThread@dflash.pipeline:run, autograd-device@torch._inductor.compile_fx:"
            "compile_fx_backward, dflash-train@torch.autograd.graph:_engine_run_backward"
        )
        == "G2"
    )
    assert family("hang: a@x:lock_a, b@x:lock_b") == "hang"
    assert (
        family(
            "AttributeError in repro-train at torch._inductor.cudagraph_trees:check_refcount < torch._inductor."
            "cudagraph_trees:expired < torch._inductor.cudagraph_trees:__call__: 'NoneType' object has no "
            "attribute '_use_count'"
        )
        == "F1c"
    )
    assert family("ValueError in worker at crash:load_batch") == "other"
    assert family(None) == "?"
    assert all(DESCRIPTIONS.values())


def test_a_failures_aftermath_does_not_rename_it():
    # A daemon thread ended at exit prints stash-exit-finalize's terminate message after the R4
    # crash that failed the run: the family is the crash's, as Catalogue.family reads it.
    summary = (
        "fx-module-not-submodule (NameError in server at torch.fx._symbolic_trace:path_of_module); "
        "then std::terminate at ?: terminate called without an active exception"
    )
    assert family(summary) == "R4" == load().family(summary)
    assert family("std::terminate at ?: terminate called without an active exception") == "stash-exit-finalize"
