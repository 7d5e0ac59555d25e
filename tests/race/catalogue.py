"""The race catalogue as data: what each repro's regression checks expect, and where it was measured.

CPU rows: every count comes from the harness runner's store results/catalogue-cpu/trials.jsonl
(matrix spec results/catalogue-cpu/spec.json, `python -m harness matrix --file
results/catalogue-cpu/spec.json`), torch 2.13.0+cpu, Python 3.11.7, the shared 2-core CPU machine,
2026-11-29; `test_catalogue_store.py` checks that the numbers here are the store's. `recorded` is
the cell `<id>:raw@<plan>`, `recorded_plain` the cell `<id>:raw@-`, `fix_recorded` the cell
`<id>:<fix>@<plan>`.

GPU rows: every count comes from the harness runner's store results/gpu-repros/trials.jsonl
(`python -m harness matrix --preset gpu-repros --trials 10`), one H200, torch 2.11.0+cu130,
2026-11-30..12-01, cells `<id>:raw@-` and `<id>:<fix>@-` (the suite runs them without a plan),
checked by `test_catalogue_store.py` as the CPU rows are; only r10's fix (a script argument, not a
registry fix) keeps its direct script runs' count (results/h200-2026-11-29/call07, call12).
`recorded` counts the failures of the race's own family, which the store test checks too, so that
the reproduction check's trial count is computed from the rate of that family.

`fix_trials` is what the suite runs per fix on every `pytest -k race`: 29 (a 10% failure rate is
caught with 95% probability) for the two fixes cpu-quick also checks (r06 nested-fx-fallback, r16
global-lock); 10 for r07, r14, r15, r18 and 2 for the deterministic triggers (r11, r13, r17), to
keep CI within its budget -- those checks print their weaker bound. `RACE_FIX_TRIALS=29` runs every
fix check with 29 trials.
"""

from __future__ import annotations

from harness.families import PATTERNS
from tests.race.racecheck import Race

CPU_TORCH = "2.13.0+cpu"
GPU_TORCH = "2.11.0+cu130"
CPU_STORE = "results/catalogue-cpu/trials.jsonl"
GPU_STORE = "results/gpu-repros/trials.jsonl"
GPU_LOGS = "results/h200-2026-11-29/call{07,09,10,12}/all.log"

# Signature families (regexes over `<outcome> <signature key> <summary>` of a failing trial).
FX_TRACE = r"fx-trace-of-dynamo-fn"          # harness.signature KNOWN_MESSAGES (F2 / R1)
GET_OBJ = r"AssertionError.*cudagraph_trees:get_obj"
SHARED_TREE = f"{PATTERNS['F1c']}|{PATTERNS['capture']}"   # harness.families: F1c and its capture face
CAPTURE = PATTERNS["capture"]

_CPU = (
    Race(id="r06", script="r06_fx_tracing_flag", device="CPU", family=FX_TRACE, plan="fx-widen",
         recorded=(10, 10), recorded_plain=(10, 10), fix="nested-fx-fallback", fix_recorded=(0, 29),
         fix_trials=29, torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r07", script="r07_current_patcher", device="CPU", family=r"fx-current-patcher",
         plan="fx-widen", recorded=(4, 10), recorded_plain=(2, 10), fix="global-lock",
         fix_recorded=(0, 10), fix_trials=10, torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r08", script="r08_config_patch_lost", device="CPU", family=r"dynamic=False lost",
         plan="switch", recorded=(0, 10), recorded_plain=(0, 10), expect="absent", repro_cap=2,
         torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r09", script="r09_per_thread_state_recompile", device="CPU",
         family=r"per-thread state recompile", plan="switch", recorded=(3, 3), recorded_plain=(3, 3),
         torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r11", script="r11_duplicate_compiles", device="CPU", family=r"duplicate compiles",
         plan="switch", recorded=(3, 3), recorded_plain=(3, 3), fix="sequential-startup",
         fix_recorded=(0, 5), fix_trials=2, torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r13", script="r13_config_thread_local", device="CPU",
         family=r"error_on_nested_fx_trace=False but", plan="switch", recorded=(3, 3),
         recorded_plain=(3, 3), fix="nested-fx-fallback", fix_recorded=(0, 5), fix_trials=2,
         torch=CPU_TORCH, source=CPU_STORE),
    # The stuck flag shows as a fresh compiled call in the main thread raising R1 after both
    # threads ended; the script catches every R1/R3 of the threads, so exit 1 + R1 is R2.
    Race(id="r14", script="r14_fx_flag_stuck", device="CPU", family=FX_TRACE, plan="fx-widen",
         recorded=(7, 10), recorded_plain=(6, 10), fix="global-lock", fix_recorded=(0, 10),
         fix_trials=10, torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r15", script="r15_eager_module_under_tracer", device="CPU",
         family=r"fx-module-not-submodule", plan="fx-widen", recorded=(10, 10), recorded_plain=(10, 10),
         fix="global-lock", fix_recorded=(0, 10), fix_trials=10, torch=CPU_TORCH, source=CPU_STORE),
    # R5 (native crash: SIGSEGV, sometimes SIGFPE) and R6 (the compiled fn's global removed).
    # The native stacks of R5 (results/native-cpu, 10/10 crashes) end in the insertion of a new
    # cache entry into the code object's ExtraState map while reset() clears it; the same clearing
    # also meets a guard's invalidation of an entry, `ExtraState::invalidate` (1 of 10 with the
    # inductor backend in results/native-cpu; once in CI with the default one, 2026-12-01, REPORT.md).
    Race(id="r16", script="r16_reset_segfault", device="CPU",
         family=r"^abort |dynamo-compiled-fn-missing", plan="reset-pressure", recorded=(10, 10),
         recorded_plain=(2, 10), fix="global-lock", fix_recorded=(0, 29), fix_trials=29,
         native=r"create_cache_entry|ExtraState::invalidate", torch=CPU_TORCH, source=CPU_STORE),
    Race(id="r17", script="r17_recompile_limit_eager_fallback", device="CPU",
         family=r"first calls ran eagerly", plan="switch", recorded=(3, 3), recorded_plain=(3, 3),
         fix="sequential-startup", fix_recorded=(0, 5), fix_trials=2, torch=CPU_TORCH,
         source=CPU_STORE),
    Race(id="r18", script="r18_is_compiling_leak_adam", device="CPU",
         family=r"eager Adam not bitwise equal", plan="switch", recorded=(10, 10), recorded_plain=(10, 10),
         fix="global-lock", fix_recorded=(0, 10), fix_trials=10, torch=CPU_TORCH, source=CPU_STORE),
    # Not a race but the suspected mechanism of the trainer's segfaults under cstash-tls-init: a
    # C stash that keeps a reference it did not take. Balanced on 2.13 (a known negative here);
    # the suite says when a torch upgrade brings it back.
    Race(id="r22", script="r22_stash_tls_refcount", device="CPU", family=r"stash-tls-refcount",
         plan="switch", recorded=(0, 10), recorded_plain=(0, 10), expect="absent", repro_cap=2,
         torch=CPU_TORCH, source=CPU_STORE),
)

_GPU = (
    # Every count is the harness runner's (results/gpu-repros, `python -m harness matrix --preset
    # gpu-repros --trials 10`, H200 calls 17-28, REPORT.md eighth to eleventh sessions), cell
    # `<id>:raw@-` and `<id>:<fix>@-` (the suite runs without a plan); test_catalogue_store.py
    # checks them, and that `recorded` counts the trials of the race's family. Until the eleventh
    # session these rows held direct script runs (2/2, 3/3: repro/README.md), and r04's family was
    # the message text, which its known-message signature (`cudagraph-mempool-already-recording`)
    # no longer carries: the reproduction check failed 0/11 on the H200 while r04 crashed 11/11.
    Race(id="r01", script="r01_cgt_tls_fresh_thread", device="GPU", family=GET_OBJ, plan=None,
         recorded=(10, 10), fix="cstash-tls-init+global-lock", fix_recorded=(0, 29), fix_trials=10,
         torch=GPU_TORCH, source=f"{GPU_STORE} cells r01:raw@-, r01:cstash-tls-init+global-lock@-"),
    Race(id="r02", script="r02_cgt_tls_backward", device="GPU", family=GET_OBJ, plan=None,
         recorded=(10, 10), fix="cstash-tls-init", fix_recorded=(0, 10), fix_trials=10,
         torch=GPU_TORCH, source=f"{GPU_STORE} cells r02:raw@-, r02:cstash-tls-init@-"),
    Race(id="r03", script="r03_cgt_reset_worker", device="GPU",
         family=GET_OBJ + r"|WRONG_RESULT: torch\.compiler\.reset", plan=None, recorded=(0, 10),
         expect="absent", repro_cap=3, torch=GPU_TORCH, source=f"{GPU_STORE} cell r03:raw@-"),
    # Two threads on one graph fail in several places of the shared tree (6 of its 10 failures at
    # `already recording to mempool`, the others the tree's other F1c faces).
    Race(id="r04", script="r04_shared_graph_two_threads", device="GPU", family=SHARED_TREE,
         plan=None, recorded=(10, 10), torch=GPU_TORCH, source=f"{GPU_STORE} cell r04:raw@-"),
    Race(id="r05", script="r05_concurrent_record_rng", device="GPU", family=CAPTURE, plan=None,
         recorded=(3, 10), fix="global-lock", fix_recorded=(0, 10), fix_trials=10, torch=GPU_TORCH,
         source=f"{GPU_STORE} cells r05:raw@-, r05:global-lock@-"),
    # The fix is a script argument (reentrant checkpointing), not a registry fix: no runner cell;
    # its count is the direct runs'.
    Race(id="r10", script="r10_checkpoint_cudagraphs", device="GPU",
         family=r"cudagraph-input-deallocated", plan=None, recorded=(10, 10), fix_args=("--reentrant",),
         fix_recorded=(0, 2), fix_trials=10, torch=GPU_TORCH,
         source=f"{GPU_STORE} cell r10:raw@-; fix: direct runs call07 and call12 r10_re ({GPU_LOGS})"),
    Race(id="r12", script="r12_legacy_cudagraphs_ptr", device="GPU", family=PATTERNS["F11"], plan=None,
         recorded=(10, 10), torch=GPU_TORCH, source=f"{GPU_STORE} cell r12:raw@-"),
    Race(id="r23", script="r23_device_sync_during_capture", device="GPU", family=CAPTURE, plan=None,
         recorded=(7, 10), fix="stream-sync", fix_recorded=(0, 10), fix_trials=10, torch=GPU_TORCH,
         source=f"{GPU_STORE} cells r23:raw@-, r23:stream-sync@-"),
)

CPU: dict[str, Race] = {r.id: r for r in _CPU}
GPU: dict[str, Race] = {r.id: r for r in _GPU}

ON_TORCH: dict[tuple[str, str], Race] = {
    # A row recorded on another torch than its table's, checked in its place where that torch
    # (major.minor) is installed: r22 measured on the H200's 2.11 through the harness runner
    # (results/gpu-repros, calls 20 of 2026-12-01, REPORT.md ninth session), where the stash loses
    # a reference per thread exit and stash-incref gives it back. Elsewhere the 2.13 row stands
    # (a known negative there) and says when an upgrade brings the race back.
    ("r22", "2.11"): Race(
        id="r22", script="r22_stash_tls_refcount", device="CPU", family=r"stash-tls-refcount",
        plan=None, recorded=(10, 10), fix="stash-incref", fix_recorded=(0, 10), fix_trials=10,
        torch=GPU_TORCH, source="results/gpu-repros/trials.jsonl cells r22:raw@-, r22:stash-incref@-"),
}


def installed(race: Race) -> Race:
    """The row to check on the installed torch: its ON_TORCH record if there is one, else `race`."""
    from tests.race.racecheck import torch_version

    major_minor = ".".join(torch_version().split(".")[:2])
    return ON_TORCH.get((race.id, major_minor), race)
