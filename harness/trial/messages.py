"""What a failure's message says: torch's known messages, keyed by name rather than by the path
that reached them (KNOWN_MESSAGES), and any other message normalised for a key
(`normalise_message`: Sentry's placeholders for addresses, numbers, paths, uuids).

Both go into signature keys (harness.trial.signature): a change that moves a key bumps
SIGNATURE_VERSION there.
"""

from __future__ import annotations

import re

MESSAGE_CAP = 120

# Known torch messages keyed on the message, not the path: each is one invariant of torch that
# many call sites reach, so the path would split one bug into many signatures.
KNOWN_MESSAGES: tuple[tuple[str, str], ...] = (
    # cudagraph trees: an output was read after a later replay overwrote it.
    ("cudagraphs-output-overwritten", r"accessing tensor output of CUDAGraphs that has been overwritten"),
    # F2 / R1: another thread is inside FX tracing (global _is_fx_tracing_flag, #126024).
    ("fx-trace-of-dynamo-fn", r"Detected that you are using FX to symbolically trace a dynamo-optimized function"),
    # F3 / R3: global CURRENT_PATCHER; raised bare or wrapped in InductorError /
    # BackendCompilerFailed (#168042, PR #187589).
    ("fx-current-patcher", r"CURRENT_PATCHER (?:is None in finally block|was changed during a revert_all_patches)"),
    # R4: another thread's tracer patched nn.Module.__call__ (PR #187589).
    ("fx-module-not-submodule", r"module is not installed as a submodule"),
    # R6: a concurrent torch._dynamo.reset() removed the compiled fn's global.
    ("dynamo-compiled-fn-missing", r"name '__compiled_fn_\w*' is not defined"),
    # F1d: concurrent captures sharing a generator (#172390).
    ("cuda-rng-offset-outside-capture", r"Offset increment outside graph capture encountered unexpectedly"),
    # F9: checkpoint + cudagraphs (#154306).
    ("cudagraph-input-deallocated", r"graph recording observed an input tensor deallocate"),
    # F1c: a second thread starts recording into a cudagraph-trees mempool that another thread is
    # recording to; reached from the forward recording (`_allocate_and_copy_recording_inputs`)
    # and from the backward warm-up (`run_eager`) alike (H200 runs, torch 2.11).
    ("cudagraph-mempool-already-recording", r"beginAllocateToPool: already recording to mempool_id"),
    # F1c: the recording's check that the pool holds only the graph's live storages found another
    # thread's allocation in it (check_memory_pool); reached from a recording's __init__, from
    # _add_first_outputs and from run_eager, in the trainer and in r04 alike (H200 runs, 2.11).
    ("cudagraph-pool-not-tracked", r"tensor\(s\) in the cudagraph pool not tracked as outputs"),
)


_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"__compiled_fn_\d+(?:_[0-9a-fA-F]+)*", "__compiled_fn_<N>"),
        (
            r"\b[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_]"
            r"[0-9a-fA-F]{12}\b",
            "<uuid>",
        ),
        (r"0x[0-9a-fA-F]+", "<hex>"),
        (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}\b", "<hash>"),
        (r"(?:[A-Za-z]:)?(?:/[\w.+@-]+){2,}/?", "<path>"),
        (r"\b\d+\.\d+(?:[eE][-+]?\d+)?\b", "<float>"),
        (r"\b\d+\b", "<int>"),
        (r"\s+", " "),
    )
)


_BANNER = re.compile(r"^=== .* ===$")


def normalise_message(message: str) -> str:
    """First 2 non-empty lines (Sentry), placeholders for event-specific values, capped.
    `=== ... ===` banners (the trainer's per-thread reports, printed right after a traceback)
    are not part of any message."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not _BANNER.match(ln.strip())][:2]
    text = " | ".join(lines)
    for pattern, repl in _NORMALISERS:
        text = pattern.sub(repl, text)
    text = text.strip()
    return text if len(text) <= MESSAGE_CAP else text[: MESSAGE_CAP - 3] + "..."
