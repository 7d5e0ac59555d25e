"""Named matrix specs (`--preset NAME`): the ones built here, and the JSON spec files under
harness/campaign/specs/ by their file name (catalogue-cpu, gpu-diag, ...). `--file SPEC.json`
reads any other (harness.campaign.matrix.specfile).

- `cpu-quick`: the smoke matrix for a 2-core CPU machine (<= 10 minutes). F2 (r06, FX tracing flag)
  raw vs `nested-fx-fallback` under the fx-widen plan, so the fix is shown to remove the failure
  under the same schedules; R5 (r16, `torch._dynamo.reset()` racing compiled calls) raw vs
  global-lock under the reset-pressure plan, so a real native SIGSEGV goes through the ABORT path
  and the lock is shown to prevent it; and the dflash tiny-cpu trainer with a compiled drafter
  step, raw vs global-lock, so the realistic workload runs end to end with tokens/s.
  Measured on the shared 2-core CPU machine (load average 3.5-7 from other work), warm
  synthetic-corpus cache: 20 trials in 2m00s and in 3m34s (two runs); r06 raw 5/5 CRASH vs fix
  0/5 both times; r16 raw 3/3 failing (SIGSEGV ABORTs, once a non-fatal TypeError inside the
  compiled frame) vs global-lock 0/3. A cold corpus cache adds its one-time generation (minutes)
  to the first dflash trials.
- `cpu-trainer`: the DFlash tiny-cpu trainer (2 drafter threads compiling with aot_eager), 8
  strategies (raw, 6 pipeline fixes alone, eager) x 3 plans (none, compile-chaos, dflash-stages)
  x 3 trials, 2 at a time: the CPU side of the campaign question.
- `gpu-campaign`: the H200 matrix: dflash presets gpu-launch-bound and gpu-gpu-bound
  compiled with reduce-overhead, 2 target + 3 drafter threads on one GPU, 24 strategies (raw, each
  fix, combinations, no cudagraphs = compile.mode default alone and with two fixes, eager =
  compile.mode none), each without and with the dflash-stages scheduler plan: 96 cells x 10
  trials (eager's fixed at 10), 12 slots per GPU (a gpu-bound trial takes 6), short runs
  (CAMPAIGN_STEPS). Trials go round-robin over the cells and the store resumes, so `--max-time`
  cuts and later runs continue with every cell at a similar n. A cell stops after
  CAMPAIGN_MAX_FAILURES failures: it cannot be recommended, and its trials go to cells that can.
- `gpu-repros`: the GPU catalogue scripts r01-r05, r10, r12, r20, r21, r23 (and r22, the C stash's refcount on 2.11), raw and under the fixes their
  docstrings name, each without and with the compile-chaos plan, 10 trials, 6 at a time per GPU.
- `gpu-topology` / `gpu-topology-4`: the gpu-campaign matrix with the seed trainer's
  thread and device plan, 5 target threads + 3 drafter threads with one GPU per drafter
  (`dflash.topology.seed_topology`), each trial on 8 (or 4) GPUs; `devices.remap` runs it on fewer.
  `gpu-topology-2`: on 2 GPUs, one target and one drafter thread per GPU (`dflash.topology.paired_topology`).
  All three add `TOPOLOGY_EXTRA_STRATEGIES` to the campaign's cells."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dflash.topology import paired_topology, seed_topology
from harness.campaign.matrix.spec import NO_PLAN, Group, MatrixError, MatrixSpec, Strategy, Workload
from harness.campaign.matrix.specfile import load_spec, strategy_from_name
from harness.campaign.plans import PlanChoice

# Trial budgets, sized from compile times measured on the 2-core CPU box (3-6 s per eager/aot_eager
# trial, 5-7 s warm inductor) with the cores shared by the runs.
REPRO_CPU_TIMEOUT_S = 120.0
DFLASH_CPU_TIMEOUT_S = 420.0
CAMPAIGN_TIMEOUT_S = 300.0
REPRO_GPU_TIMEOUT_S = 600.0


DEFAULT_PRESET = "cpu-quick"
"""What `python -m harness matrix` runs when no --preset or --file is given."""


def _plan(profile: str) -> PlanChoice:
    return PlanChoice(name=profile, profile=profile)


def _strategies(*names: str) -> dict[str, Strategy]:
    return {name: strategy_from_name(name) for name in names}


CPU_ENV = (("OMP_NUM_THREADS", "1"),)
"""One intra-op thread per trial: two trials share two cores, and oversubscribed OpenMP threads
made the trainer's corpus generation ~10x slower under load (measured). The races are between Python
threads and do not depend on intra-op threads."""


def cpu_quick() -> MatrixSpec:
    workloads = {
        "r06": _cpu_repro("r06", "r06_fx_tracing_flag"),
        "r16": _cpu_repro("r16", "r16_reset_segfault"),
        "dflash-tiny": _tiny_cpu_trainer(),
    }
    return MatrixSpec(
        name="cpu-quick",
        workloads=workloads,
        strategies=_strategies("raw", "nested-fx-fallback", "global-lock"),
        groups=(
            Group(workloads=("r06",), strategies=("raw", "nested-fx-fallback"), plans=(_plan("fx-widen"),), trials=5),
            Group(workloads=("r16",), strategies=("raw", "global-lock"), plans=(_plan("reset-pressure"),), trials=3),
            Group(workloads=("dflash-tiny",), strategies=("raw", "global-lock"), plans=(NO_PLAN,), trials=2),
        ),
        trials=5,
        workers=2,
        max_time_s=540.0,
        # The README's main job: a fresh checkout must run it, not find the committed store
        # complete and print it (results/cpu-quick is the run REPORT.md cites, made with
        # `--store results/cpu-quick`). runs/ is git-ignored; show/replay/shrink look there first.
        store="runs/cpu-quick",
    )


def _tiny_cpu_trainer(*sets: str) -> Workload:
    """tiny-cpu compiling with aot_eager (real Dynamo and AOT tracing in two drafter threads, without
    minutes of C++ compiles); hang_s allows a cold synthetic-corpus build, which prints nothing."""
    sets = ("train.export=false", *sets, "compile.mode=default", "compile.backend=aot_eager")
    argv = ("--preset", "tiny-cpu", *(arg for value in sets for arg in ("--set", value)))
    return Workload(
        name="dflash-tiny", kind="dflash", argv=argv, timeout_s=DFLASH_CPU_TIMEOUT_S, hang_s=240.0, env=CPU_ENV
    )


def _cpu_repro(name: str, script: str) -> Workload:
    return Workload(name=name, kind="repro", argv=(script,), timeout_s=REPRO_CPU_TIMEOUT_S, hang_s=60.0, env=CPU_ENV)


CPU_TRAINER_STRATEGIES = (
    "raw",
    "global-lock",
    "sequential-startup",
    "thread-local-warmup",
    "persistent-buffers",
    "graph-isolation",
    "nested-fx-fallback",
)


def cpu_trainer() -> MatrixSpec:
    """The trainer's CPU side of the campaign's question: tiny-cpu, 2 drafter threads compiling the
    drafter step at once (aot_eager: Dynamo + AOT tracing, where the CPU races live), each
    pipeline fix alone and eager, plain and under compile-chaos / dflash-stages."""
    strategies = _strategies(*CPU_TRAINER_STRATEGIES)
    strategies["eager"] = Strategy(name="eager", sets=("compile.mode=none",))
    workloads = {
        "dflash-tiny": _tiny_cpu_trainer("train.eval_prompts=0"),
    }
    return MatrixSpec(
        name="cpu-trainer",
        workloads=workloads,
        strategies=strategies,
        groups=(
            Group(
                workloads=("dflash-tiny",),
                strategies=tuple(strategies),
                plans=(NO_PLAN, _plan("compile-chaos"), _plan("dflash-stages")),
            ),
        ),
        trials=3,
        workers=2,
        max_failures=None,
    )


GPU_FIX_STRATEGIES = (
    "raw",
    "global-lock",
    "sequential-startup",
    "thread-local-warmup",
    "local-tls-init",
    "persistent-buffers",
    # The combination the seed projects converged on.
    "thread-local-warmup+persistent-buffers+local-tls-init+sequential-startup",
    "cstash-tls-init",
    "graph-isolation",
    "cstash-tls-init+graph-isolation+sequential-startup",
    "single-thread-autograd",
    # Against G1, G2 and r19, the trainer's own failures (docs/log/2026-11-29-dflash-trainer-on-h200.md):
    # single-thread-autograd keeps the lazy backward compile off the autograd device thread.
    "cstash-tls-init+graph-isolation+sequential-startup+cublas-handle-init+single-thread-autograd+target-hook-taps",
    # Without a C-stash init every reduce-overhead cell dies of F1 (a per-thread gap), with it of
    # F1c or a capture beside a synchronize: one lock serialises the captures, plus G1's fix.
    "global-lock+cstash-tls-init+cublas-handle-init",
    # The narrow lock (cudagraph-lock: record, warm-up and replay of cudagraph trees only) in
    # place of the global one, without and with per-thread graphs against F1c's shared outputs.
    "cstash-tls-init+cudagraph-lock+cublas-handle-init",
    "cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init",
    # The two C-stash cells that got furthest, with stash-incref against their segfaults (r22: the
    # stash frees per-thread dicts twice when a stashing thread exits).
    "global-lock+cstash-tls-init+cublas-handle-init+stash-incref",
    "cstash-tls-init+cudagraph-lock+cublas-handle-init+stash-incref",
    # stream-sync against a target's device-wide synchronize beside a drafter's capture (r23); the
    # lock-free candidate adds per-thread graphs, the backward on the drafter's thread (G2) and the
    # narrow lock.
    "global-lock+cstash-tls-init+cublas-handle-init+stash-incref+stream-sync",
    "cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init+single-thread-autograd+stash-incref+stream-sync",
    # The narrow lock leaves compiles concurrent, so a compiled call can meet another drafter's FX
    # trace (F2, seen in a bench): nested-fx-fallback runs that call eagerly instead.
    "cstash-tls-init+graph-isolation+cudagraph-lock+cublas-handle-init+single-thread-autograd+stash-incref"
    "+stream-sync+nested-fx-fallback",
)

CAMPAIGN_NO_CUDAGRAPHS_FIXES = ("single-thread-autograd", "global-lock")


CAMPAIGN_STEPS = {"launch-bound": 40, "gpu-bound": 30}
"""Optimizer steps per campaign trial (x3 drafter micro-steps). The races sit in the startup
(concurrent first compiles, cudagraph recording, first backward) and in shape changes; a short
run keeps a trial to its process start, compile and a few seconds of steps. Throughput is the trainer's
steady-state rate (second half of the steps), so the short run does not charge compile time."""

CAMPAIGN_HANG_S = 180.0
"""No heartbeat while every drafter thread compiles (the target threads block on the full hidden
queue): a cold reduce-overhead compile of 12 trials at once must not read as a hang. H200 gpu-diag
trials took 120-146 s to reach their compile crash with 9 at once."""

CAMPAIGN_MAX_FAILURES = 1
"""One failure takes a cell out of the running: a configuration that crashed, hung or corrupted
once is not the safe one the campaign looks for, and its 1/1 (95% Wilson lower bound 21%) says
so. GPU time is short (about 150 trainer trials in 30 minutes of one H200), so it goes to cells
still clean. A failing cell's k/n is the evidence that ruled it out, not a rate estimate at n = 10."""

CAMPAIGN_GPU_SLOTS = {"launch-bound": 1, "gpu-bound": 6}
"""Slots of the GPU's 12 one trial takes, from the memory trials held on the H200 (torch 2.11):
launch-bound 1.6-4.3 GiB, gpu-bound up to 60.5 GiB when run to the end. 6 slots: at most 2
gpu-bound trials at once (2 x 60.5 of 139.8 GiB), beside launch-bound ones of 1 slot
(docs/log/2026-11-30-gpu-bound-mix-order-workaround.md: 4 at once lost 8 of 56 to memory)."""

CAMPAIGN_ENV = (("TORCHINDUCTOR_COMPILE_THREADS", "1"),)
"""Up to 12 trials share the host's 16 cores; each spawning a 16-process compile pool would
oversubscribe it. Kernels come from the shared on-disk caches after the first trials."""


def _campaign_strategies(extra: tuple[str, ...] = ()) -> dict[str, Strategy]:
    """The campaign's strategies, then `extra` ones, eager last."""
    strategies = _strategies(*GPU_FIX_STRATEGIES)
    strategies["no-cudagraphs"] = Strategy(name="no-cudagraphs", sets=("compile.mode=default",))
    # Without CUDA graphs the trainer deadlocks in G2 (lazy backward compile on the autograd device
    # thread): pair it with the two fixes that keep that thread out of the lock order.
    for fix in CAMPAIGN_NO_CUDAGRAPHS_FIXES:
        strategies[f"no-cudagraphs+{fix}"] = Strategy(
            name=f"no-cudagraphs+{fix}", fixes=(fix,), sets=("compile.mode=default",)
        )
    strategies.update(_strategies(*extra))
    strategies["eager"] = Strategy(name="eager", sets=("compile.mode=none",))
    return strategies


TOPOLOGY_EXTRA_STRATEGIES = ("local-tls-init+single-thread-autograd",)
"""Topology cells beyond the campaign's. On 4 H200s (results/gpu-topology-4, 2026-11-30) every
CUDA-graph cell without cstash-tls-init died of F1 and every cell with it segfaulted 30/48
(Python heap corruption in any thread): whether the C stash or cudagraph trees on several devices
corrupt the heap, those cells cannot tell. This one reaches cudagraph trees without the stash:
local-tls-init seeds each thread's `local` (the forward's get_obj) and single-thread-autograd runs
the backward on that thread instead of the device's autograd thread."""


def _campaign(name: str, *, gpus: int = 1, topology: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> MatrixSpec:
    """The campaign matrix on both GPU presets; `topology` are `--set` overrides of the thread and
    device plan, each trial taking `gpus` GPUs; `extra` strategies are added before eager."""
    strategies = _campaign_strategies(extra)
    workloads = {
        wname: Workload(
            name=wname,
            kind="dflash",
            argv=(
                "--preset",
                preset,
                "--set",
                "compile.mode=reduce-overhead",
                "--set",
                f"train.steps={CAMPAIGN_STEPS[wname]}",
                "--set",
                "train.eval_prompts=0",
                "--set",
                "train.export=false",
                *(a for kv in topology for a in ("--set", kv)),
            ),
            timeout_s=CAMPAIGN_TIMEOUT_S,
            hang_s=CAMPAIGN_HANG_S,
            gpus=gpus,
            env=CAMPAIGN_ENV,
            gpu_slots=CAMPAIGN_GPU_SLOTS[wname],
        )
        for wname, preset in (("launch-bound", "gpu-launch-bound"), ("gpu-bound", "gpu-gpu-bound"))
    }
    return MatrixSpec(
        name=name,
        workloads=workloads,
        strategies=strategies,
        groups=(
            Group(
                workloads=tuple(workloads),
                strategies=tuple(s for s in strategies if s != "eager"),
                plans=(NO_PLAN, _plan("dflash-stages")),
            ),
            # Eager is the throughput control, not a candidate: 10 trials whatever --trials says,
            # so that raising --trials for the candidates leaves it out.
            Group(
                workloads=tuple(workloads), strategies=("eager",), plans=(NO_PLAN, _plan("dflash-stages")), trials=10
            ),
        ),
        trials=10,
        per_gpu=12,
        max_failures=CAMPAIGN_MAX_FAILURES,
    )


def gpu_campaign() -> MatrixSpec:
    return _campaign("gpu-campaign")


def gpu_topology() -> MatrixSpec:
    """The seed topology: the campaign on 8 GPUs, 5 target GPUs + 3 drafter GPUs, every trial on all 8."""
    return _campaign("gpu-topology", gpus=8, topology=seed_topology(8), extra=TOPOLOGY_EXTRA_STRATEGIES)


def gpu_topology_4() -> MatrixSpec:
    """The seed topology scaled to 4 GPUs: 5 target threads on cuda:0, one drafter on each of cuda:1-3."""
    return _campaign("gpu-topology-4", gpus=4, topology=seed_topology(4), extra=TOPOLOGY_EXTRA_STRATEGIES)


def gpu_topology_2() -> MatrixSpec:
    """The seed topology on 2 GPUs: one target and one drafter thread per GPU (`dflash.topology.paired_topology`)."""
    return _campaign("gpu-topology-2", gpus=2, topology=paired_topology(2), extra=TOPOLOGY_EXTRA_STRATEGIES)


GPU_REPRO_FIXES = {
    # Script -> the fixes its docstring names (r10's fix is an argument, not a registry fix; r12's
    # global-lock is a known negative: the graph is still shared).
    # The race suite's r01 fix (cstash-tls-init+global-lock, 0/2 in direct runs) has no runner
    # count yet; with stash-incref because r01's workers exit after stashing (r22's double free:
    # a cstash-tls-init+cudagraph-lock trial segfaulted, results/gpu-repros, 2026-12-01).
    "r01_cgt_tls_fresh_thread": (
        "local-tls-init",
        "cstash-tls-init",
        "cstash-tls-init+cudagraph-lock",
        "cstash-tls-init+global-lock",
        "cstash-tls-init+global-lock+stash-incref",
    ),
    "r02_cgt_tls_backward": ("cstash-tls-init", "single-thread-autograd"),
    "r03_cgt_reset_worker": ("cstash-tls-init",),
    "r04_shared_graph_two_threads": (
        "graph-isolation",
        "global-lock",
        "cudagraph-lock",
        "graph-isolation+cudagraph-lock",
    ),
    "r05_concurrent_record_rng": ("global-lock", "cudagraph-lock"),
    "r10_checkpoint_cudagraphs": (),
    "r12_legacy_cudagraphs_ptr": ("graph-isolation", "global-lock"),
    # G2, from a trainer hang on the H200 (docs/log/2026-11-29-dflash-trainer-on-h200.md).
    "r20_flex_backward_compile_deadlock": ("single-thread-autograd", "global-lock"),
    # Not a race: 2.11's mix-order workspace slice with dynamic shapes (pytorch#174379); its
    # workaround is an argument (--no-mix-order), not a registry fix. Here so that the next
    # gpu-repros run says whether the script reproduces what the trainer hit 21 times.
    "r21_inductor_mix_order_workspace": (),
    # Not a GPU script: the C stash's refcount across thread exits (r22), here to measure the
    # H200's torch 2.11, which the CPU box lacks (2.13 is balanced); stash-incref must hold.
    "r22_stash_tls_refcount": ("stash-incref",),
    # The trainer's 1/29 in the global-lock cell: a device-wide synchronize beside another thread's
    # recording. global-lock is the expected negative (the wait is outside it).
    "r23_device_sync_during_capture": ("stream-sync", "global-lock"),
}


def gpu_repros() -> MatrixSpec:
    workloads = {
        script[:3]: Workload(
            name=script[:3], kind="repro", argv=(script,), timeout_s=REPRO_GPU_TIMEOUT_S, hang_s=120.0, gpus=1
        )
        for script in GPU_REPRO_FIXES
    }
    fixes = sorted({f for fs in GPU_REPRO_FIXES.values() for f in fs})
    groups = tuple(
        Group(
            workloads=(script[:3],),
            strategies=("raw", *GPU_REPRO_FIXES[script]),
            plans=(NO_PLAN, _plan("compile-chaos")),
        )
        for script in GPU_REPRO_FIXES
    )
    return MatrixSpec(
        name="gpu-repros",
        workloads=workloads,
        strategies=_strategies("raw", *fixes),
        groups=groups,
        trials=10,
        per_gpu=6,
    )


PRESETS: dict[str, Callable[[], MatrixSpec]] = {
    "cpu-quick": cpu_quick,
    "cpu-trainer": cpu_trainer,
    "gpu-campaign": gpu_campaign,
    "gpu-repros": gpu_repros,
    "gpu-topology": gpu_topology,
    "gpu-topology-4": gpu_topology_4,
    "gpu-topology-2": gpu_topology_2,
}


SPECS_DIR = Path(__file__).resolve().parents[1] / "specs"
"""Spec files that are presets too: `--preset gpu-diag` reads specs/gpu-diag.json."""


def names() -> list[str]:
    """Every preset: the built ones, then the spec files'."""
    return [*PRESETS, *sorted(p.stem for p in SPECS_DIR.glob("*.json") if p.stem not in PRESETS)]


def get(name: str) -> MatrixSpec:
    if name in PRESETS:
        return PRESETS[name]()
    path = SPECS_DIR / f"{name}.json"
    if "/" not in name and path.is_file():
        return load_spec(path)
    raise MatrixError(f"unknown preset {name!r} (known: {', '.join(names())})")
