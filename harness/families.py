"""Failure families: which known failure mode a signature belongs to (F1..F14 of
torch-compile-races.md, G1/G2 and r19 of REPORT.md), read from its one-line summary.

A signature key says "these trials failed the same way"; a family says which documented bug that
way is, so that a table can read "F1 2/2" instead of a 140-character assertion path, and so that
one mode reached by several paths (F1 from the forward and from the backward; a capture error
met in five stacks) reads as one. ClusterFuzz does the same with its crash categories. The first
rule that matches wins; no match is `other`: a new way to fail, worth a look.
"""

from __future__ import annotations

import re

FAMILIES: tuple[tuple[str, str, str], ...] = (
    # (family, regex over the signature summary, what it is). F-ids are torch-compile-races.md's,
    # R-ids cpu-experiments.md's (CPU, torch 2.13), G-ids and r19 REPORT.md's.
    ("compiler", r"InductorError in .* at torch\._inductor\.tiling_utils",
     "Inductor's tiling analysis on 2.11 (pytorch#181563): a compiler bug, not a race"),
    ("F1", r"cudagraph_trees:get_obj", "CUDAGraph Trees TLS missing in a fresh or autograd thread (#123177)"),
    ("G1", r"CUBLAS_STATUS_NOT_INITIALIZED", "cuBLAS handle created inside a capture"),
    ("G2", r"^hang: .*autograd-device@torch\._inductor\.compile_fx:compile_fx_backward",
     "lazy backward compile on the autograd device thread vs a Dynamo trace needing that thread"),
    # The `.view(nsplit, rnumel)` after a mix-order reduction (RMSNorm backward) with dynamic
    # shapes: 2.11 prints the slice bounds as `{idx} * {nsplit} * {rnumel}` with nsplit a sum, so
    # operator precedence cuts the slice short (pytorch#174379, fixed by #176008; 2.13 has the
    # parentheses). Every generated line in results/gpu-* is the same one, with or without CUDA
    # graphs, and one thread per pipeline stage fails as three do (results/gpu-shape2): a
    # compiler bug, not a race. Read until 2026-11-30 as F1c's crash face, which it is not.
    ("mix-order", r"(?:cudagraph_trees:run|output_code:__call__): shape .* is invalid for input of size",
     "Inductor's mix-order reduction slices its workspace short with dynamic shapes on 2.11 "
     "(pytorch#174379): a compiler bug, not a race"),
    # The CUDAWarmupNode and dealloc_current_path_weakrefs alternatives are the tree manager's
    # state changed under a thread by another's (gpu-bound cstash-tls-init, calls 12 of
    # 2026-11-30, where every thread shares the main thread's tree): a graph recorded on a parent that another thread's warm-up made a CUDAWarmupNode,
    # and a node whose weakrefs and stack traces another thread's run left unequal in length
    # (also r04's face on the H200: two threads sharing one graph, fixture gpu_f1c_weakrefs_assert).
    ("F1c", r"cudagraph-mempool-already-recording|cudagraph pool not tracked"
            r"|cudagraphs-output-overwritten|compiled result differs from eager"
            r"|'CUDAWarmupNode' object has no attribute|cudagraph_trees:dealloc_current_path_weakrefs"
            # r04 under global-lock on the H200 (ninth session): the shared graph's storage weakref
            # emptied by the other thread's run, serialised or not.
            r"|cudagraph_trees:check_refcount"
            # r04 raw on the H200 (gpu-repros, 1 of 20): the recording's check that the pool holds
            # only the graph's live storages found another thread's allocation in it.
            r"|cudagraph_trees:check_memory_pool",
     "one cudagraph tree or pool used by two threads"),
    ("capture", r"operation not permitted when stream is capturing|previous error during capture"
                r"|dependency created on uncaptured work|cuda-rng-offset-outside-capture",
     "one thread's CUDA call while another thread captures (F1c, F1d)"),
    # r12's face on the H200 (legacy cudagraphify's static-input assert, 2.11 compile_fx.py line
    # 1966): `other` in gpu-repros until the ninth session, 29 of 29 r12 failures.
    ("F11", r"AssertionError in .* at torch\._inductor\.compile_fx:run < torch\._inductor\.utils:run",
     "legacy (non-tree) cudagraphs: a second instance's parameters break a graph's static inputs"),
    # The trainer has no checkpointing, yet one gpu-bound trial of a shared-tree cell (no
    # graph-isolation; H200 call 20) raised the same message: most likely another thread freed a
    # tensor the tree was recording with. One message, two causes: the family names both.
    ("F9", r"cudagraph-input-deallocated",
     "an input freed during a cudagraph recording: activation checkpointing (F9), or another thread's frees in a shared tree"),
    # repro r22's measurement, not a crash: each thread exit after a C stash took a reference the
    # stash never got (a later double free, behind cstash-tls-init's segfaults; 20/20 on 2.11).
    ("stash-refcount", r"stash-tls-refcount", "torch._C._stash_obj_in_tls keeps a reference it did not take (r22)"),
    ("F2", r"fx-trace-of-dynamo-fn", "FX's is-tracing flag is process-global (R1, R2)"),
    ("F3", r"fx-current-patcher", "FX's CURRENT_PATCHER is process-global (R3)"),
    ("R4", r"fx-module-not-submodule", "eager modules under another thread's tracer"),
    # SIGFPE is the same crash (a hash modulo the bucket count of a map just freed; the native
    # stacks of results/native-cpu end in create_cache_entry for both signals).
    # Also the face r16 showed with reset_code_caches() (results/native-cpu): a segfault in
    # ExtraState::invalidate.
    ("R5", r"(?:Segmentation fault|Floating point exception) at torch\._dynamo\.eval_frame:compile_wrapper"
           r"|dynamo-compiled-fn-missing|Segmentation fault at torch\._dynamo\.guards:invalidate",
     "torch._dynamo.reset() while another thread runs compiled code (R5, R6)"),
    # r16 with the inductor backend also died this way (results/native-cpu), but so did a
    # gpu-bound local-tls-init trial in Inductor's cache lookup (call 11 of 2026-11-30), and the
    # trainer never calls reset(): the message says an object was freed twice, not by what race.
    ("pybind-dealloc", r"pybind11_object_dealloc\(\): Tried to deallocate unregistered instance",
     "pybind11 freed an instance it does not know (a double free; r16's reset race on CPU, cause "
     "unknown in the trainer)"),
    ("F4", r"dynamic=False lost", "a config patch lost across threads"),
    ("F5", r"per-thread state recompile", "guards on per-thread state recompile"),
    ("F10", r"duplicate compiles|first calls ran eagerly", "duplicate compiles, recompile limit (R7)"),
    ("F14", r"error_on_nested_fx_trace=False but", "config set in one thread invisible to others (R9)"),
    ("R8", r"eager Adam not bitwise equal", "is_compiling() is process-wide during any compile"),
    ("r19", r"IndexError in dflash-target at .*dflash\.target:_tap",
     "transformers' hidden-state capture under another thread's compile"),
    ("segv-gc", r"Segmentation fault: during garbage collection", "native crash in a finaliser run by GC"),
    ("segv", r"Segmentation fault", "native crash"),
    ("hang", r"^hang: ", "no progress (another deadlock)"),
)

_COMPILED = tuple((name, re.compile(pattern)) for name, pattern, _ in FAMILIES)
DESCRIPTIONS = {name: what for name, _, what in FAMILIES}
PATTERNS = {name: pattern for name, pattern, _ in FAMILIES}
"""A family's regex, for checks that name a failure by its family (tests/race/catalogue.py)."""
ORDER = (*DESCRIPTIONS, "other", "?")
"""Every family `family()` can return, in table order."""


def family(summary: str | None) -> str:
    """The family of a signature summary; `other` when no rule matches, `?` without a summary."""
    if not summary:
        return "?"
    for name, pattern in _COMPILED:
        if pattern.search(summary):
            return name
    return "other"
