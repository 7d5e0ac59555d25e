"""Policies: fixes with no hook of their own; the program reads `FixSet.active(name)` and acts
(the trainer's start-up order, warm-up, padding, hidden-state taps, target locking, stream sync)."""

from __future__ import annotations

from harness.runtime.fixes.base import Policy


class SequentialStartup(Policy):
    """Policy: compile and run the first training step of each model one thread at a time.

    Compile serially, then go concurrent: each model's first compile and step (forward and lazy
    backward) finish before the next thread starts its own. Avoids concurrent first compiles,
    duplicate compiles and the lazy backward compile on the autograd thread (F7, F8, F10, R7). Not
    enough for F1c/F1d (re-records later). Issue #123177.
    """

    name = "sequential-startup"
    targets = ("F7", "F8", "F10")
    upstream = ("#123177", "#118260")


class ThreadLocalWarmup(Policy):
    """Policy: each thread warms up (compiles/records) its own model on itself.

    Records graphs in the thread's own tree manager; helps F1/F1c only with
    local-tls-init or cstash-tls-init and only if the graph is not shared with another thread.
    Issue #123177 (flexivtrainer-style per-thread warm-up).
    """

    name = "thread-local-warmup"
    targets = ("F1", "F1c")
    upstream = ("#123177",)


class PersistentBuffers(Policy):
    """Policy: pad every batch to one fixed length (collate pad_to) so shapes never change.

    Fewer recompiles and no cudagraph re-records on new shapes, hence less recompile-limit
    pressure across threads sharing a code object (F10, F1c amplifier, F5). Issue #118260.
    """

    name = "persistent-buffers"
    targets = ("F10", "F5", "F1c")
    upstream = ("#118260",)


class TargetHookTaps(Policy):
    """Policy: the target threads tap hidden states with per-thread layer hooks
    (TargetModel.hidden_hooked) instead of transformers' output_hidden_states capture.

    That capture keeps its collector in a variable that is process-global while any thread is
    compiling (transformers#44614, repro r19); torch.compiler.is_compiling() is process-wide during
    any trace (R8), so a drafter compile is enough for two eager target threads to collide:
    `IndexError: tuple index out of range` in `_tap`, or silently wrong context. Found in the
    trainer on CPU with 2 target + 3 drafter threads (results/cpu-gpu-strategies).
    """

    name = "target-hook-taps"
    targets = ("r19", "R8")
    upstream = ("transformers#44614",)


class EagerTargetUnlocked(Policy):
    """Policy: an uncompiled target's forward runs outside the call-level fixes (no lock).

    `global-lock` wraps the target's eager forward as well as the drafter's compiled step, so a
    target forward and a drafter step never overlap: in the H200 launch-bound benches (torch 2.11,
    CUDA graphs, global-lock) the target threads were busy 88-100% of the run, lock waits
    included, and the drafters 45-60%. The lock covers that eager forward only for r19
    (transformers' hidden-state capture under another thread's compile, transformers#44614), which target-hook-taps
    removes, so it is only allowed beside target-hook-taps. It fixes nothing: it is a cost
    candidate, clean only once a stressed cell says so.
    """

    name = "eager-target-unlocked"
    requires = ("target-hook-taps",)
    upstream = ("transformers#44614",)


class StreamSync(Policy):
    """Policy: a target thread waits for its forward on its own current stream, not the device.

    The target loop synchronizes before handing the hidden states over; device-wide, that fails
    with `operation not permitted when stream is capturing` whenever a drafter thread is recording
    a cudagraph on the same device, whatever the capture's mode (F1d's message; NVIDIA/
    TensorRT#2888). A global lock does not cover it: the lock is around compiled calls and the
    synchronize comes after the target's forward leaves it (H200, launch-bound,
    global-lock+cstash-tls-init+cublas-handle-init+stash-incref: 1/29 stressed trials in
    results/gpu-campaign, torch 2.11, 2026-12-01). Repro r23. cudagraph trees capture on a pool
    stream ("thread_local" mode, PR #107407), never the thread's current one, so the stream wait
    is legal beside a capture.
    """

    name = "stream-sync"
    targets = ("F1d",)
    upstream = ("#107407", "NVIDIA/TensorRT#2888")
