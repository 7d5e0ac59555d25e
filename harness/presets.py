"""Named matrices: `python -m harness matrix --preset NAME`.

- `cpu-quick`: the smoke matrix for a 2-core CPU machine (<= 10 minutes). F2 (r06, FX tracing flag)
  raw vs `nested-fx-fallback` under the fx-widen plan, so the fix is shown to remove the failure
  under the same schedules; R5 (r16, `torch._dynamo.reset()` racing compiled calls) raw under the
  reset-pressure plan, so a real native SIGSEGV goes through the ABORT path; and the dflash
  tiny-cpu trainer raw vs global-lock, so the realistic workload runs end to end with tokens/s.
  Measured wall time: see the final report of the session that ran it (docs/REPORT.md).
- `gpu-campaign`: the H200 matrix: dflash presets gpu-launch-bound and gpu-gpu-bound compiled with
  reduce-overhead, 13 strategies (raw, each fix, combinations, no cudagraphs = compile.mode default,
  eager = compile.mode none), each without and with the dflash-stages scheduler plan, 10 trials.
- `gpu-repros`: the GPU catalogue scripts r01-r05, r10, r12, raw, with and without compile-chaos.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.matrix import NO_PLAN, Group, MatrixError, MatrixSpec, PlanChoice, Strategy, Workload

# Trial budgets, sized from cpu-experiments.md exp 5 (3-6 s per eager/aot_eager trial, 5-7 s warm
# inductor) on 2 cores shared by the runs.
REPRO_CPU_TIMEOUT_S = 120.0
DFLASH_CPU_TIMEOUT_S = 300.0
DFLASH_GPU_TIMEOUT_S = 1800.0
REPRO_GPU_TIMEOUT_S = 600.0


def _plan(profile: str) -> PlanChoice:
    return PlanChoice(name=profile, profile=profile)


def _strategies(*names: str) -> dict[str, Strategy]:
    out = {}
    for name in names:
        out[name] = Strategy(name=name) if name == "raw" else Strategy(name=name, fixes=tuple(name.split("+")))
    return out


def cpu_quick() -> MatrixSpec:
    workloads = {
        "r06": Workload(name="r06", kind="repro", argv=("r06_fx_tracing_flag",), timeout_s=REPRO_CPU_TIMEOUT_S,
                        hang_s=60.0),
        "r16": Workload(name="r16", kind="repro", argv=("r16_reset_segfault",), timeout_s=REPRO_CPU_TIMEOUT_S,
                        hang_s=60.0),
        "dflash-tiny": Workload(name="dflash-tiny", kind="dflash",
                                argv=("--preset", "tiny-cpu", "--set", "train.export=false"),
                                timeout_s=DFLASH_CPU_TIMEOUT_S, hang_s=120.0),
    }
    return MatrixSpec(
        name="cpu-quick", workloads=workloads,
        strategies=_strategies("raw", "nested-fx-fallback", "global-lock"),
        groups=(
            Group(workloads=("r06",), strategies=("raw", "nested-fx-fallback"), plans=(_plan("fx-widen"),),
                  trials=5),
            Group(workloads=("r16",), strategies=("raw",), plans=(_plan("reset-pressure"),), trials=3),
            Group(workloads=("dflash-tiny",), strategies=("raw", "global-lock"), plans=(NO_PLAN,), trials=1),
        ),
        trials=5, workers=2, max_time_s=540.0,
    )


GPU_FIX_STRATEGIES = (
    "raw", "global-lock", "sequential-startup", "thread-local-warmup", "local-tls-init", "persistent-buffers",
    # The combination the seed projects converged on.
    "thread-local-warmup+persistent-buffers+local-tls-init+sequential-startup",
    "cstash-tls-init", "graph-isolation", "cstash-tls-init+graph-isolation+sequential-startup",
    "single-thread-autograd",
)


def gpu_campaign() -> MatrixSpec:
    strategies = _strategies(*GPU_FIX_STRATEGIES)
    strategies["no-cudagraphs"] = Strategy(name="no-cudagraphs", sets=("compile.mode=default",))
    strategies["eager"] = Strategy(name="eager", sets=("compile.mode=none",))
    workloads = {
        name: Workload(name=name, kind="dflash", argv=("--preset", preset, "--set", "compile.mode=reduce-overhead"),
                       timeout_s=DFLASH_GPU_TIMEOUT_S, hang_s=300.0, gpus=1)
        for name, preset in (("launch-bound", "gpu-launch-bound"), ("gpu-bound", "gpu-gpu-bound"))
    }
    return MatrixSpec(
        name="gpu-campaign", workloads=workloads, strategies=strategies,
        groups=(Group(workloads=tuple(workloads), strategies=tuple(strategies),
                      plans=(NO_PLAN, _plan("dflash-stages"))),),
        trials=10, per_gpu=1, max_failures=None,
    )


GPU_REPROS = ("r01_cgt_tls_fresh_thread", "r02_cgt_tls_backward", "r03_cgt_reset_worker",
              "r04_shared_graph_two_threads", "r05_concurrent_record_rng", "r10_checkpoint_cudagraphs",
              "r12_legacy_cudagraphs_ptr")


def gpu_repros() -> MatrixSpec:
    workloads = {
        script[:3]: Workload(name=script[:3], kind="repro", argv=(script,), timeout_s=REPRO_GPU_TIMEOUT_S,
                             hang_s=120.0, gpus=1)
        for script in GPU_REPROS
    }
    return MatrixSpec(
        name="gpu-repros", workloads=workloads, strategies=_strategies("raw"),
        groups=(Group(workloads=tuple(workloads), strategies=("raw",), plans=(NO_PLAN, _plan("compile-chaos"))),),
        trials=10, per_gpu=2,
    )


PRESETS: dict[str, Callable[[], MatrixSpec]] = {
    "cpu-quick": cpu_quick,
    "gpu-campaign": gpu_campaign,
    "gpu-repros": gpu_repros,
}


def get(name: str) -> MatrixSpec:
    if name not in PRESETS:
        raise MatrixError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]()
